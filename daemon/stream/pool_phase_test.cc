// File: daemon/stream/pool_phase_test.cc
//
// The pool step of a phase (PhasePrefetcher::Begin with PoolPrefetcher): two components
// loaded from files whose sum is more than the pool's budget, in a staged run. The decode
// phase prefetches the text encoder: the transformer (the caller's, unused, outside the
// phase) goes to its files and the text encoder comes back in the background; the prompt
// phase prefetches the transformer while the text encoder is needed: only what the free room
// holds comes back (split). The pool never holds more than its budget; another user's phase
// neither moves nor names the caller's components; keep_pool_bytes leaves the pool alone.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "daemon/common/random_id.h"
#include "daemon/common/temp_dir_for_test.h"
#include "daemon/store/safetensors_for_test.h"
#include "daemon/stream/phase_prefetcher.h"

namespace ddo {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr uint64_t kKiB = 1 << 10;
constexpr uint64_t kMiB = 1 << 20;

class PoolPhaseTest : public ::testing::Test {
 protected:
  void SetUp() override {
    PoolOptions pool;
    pool.budget_bytes = 28 * kMiB;  // each component takes 16 MiB
    pool.name_namespace = PoolNamespace(dir_.Join("sock"));
    pool_ = std::make_unique<HostPool>(pool);
    store_ = std::make_unique<ComponentStore>(*pool_, registry_,
                                              StoreOptions{dir_.Join("manifest.json"), 2});
    std::vector<std::pair<std::string, std::string>> tensors;
    for (int i = 0; i < 64; ++i) {
      tensors.emplace_back("layer" + std::to_string(i) + ".weight",
                           std::string(256 * kKiB, static_cast<char>(i)));
    }
    path_ = dir_.Join("model.safetensors");
    ASSERT_TRUE(WriteU8Safetensors(path_, tensors));
    table_ = std::make_unique<DeviceTable>(GpuInventory{}, DeviceTableOptions{},
                                           pool_->name_prefix());
    prefetcher_ = std::make_unique<PhasePrefetcher>(*store_, *table_,
                                                    [](const std::string&) { return false; });
    ASSERT_TRUE(Load("te").ok());
    ASSERT_TRUE(Load("transformer").ok());  // "te" demoted to make room
  }
  void TearDown() override {
    prefetcher_.reset();
    table_.reset();
    store_->Close(/*discard=*/true);
  }
  absl::StatusOr<LoadResult> Load(const std::string& key) {
    SafetensorsRequest request;
    request.cache_key = key;
    request.files.push_back(SourceOf(path_));
    return store_->LoadSafetensors(lease_, std::move(request), [](uint64_t, uint64_t) {},
                                   [] { return false; });
  }
  ComponentTier TierOf(const std::string& key) {
    auto got = store_->Get(key, lease_.caller);
    EXPECT_TRUE(got.ok()) << got.status();
    return got.ok() ? got->tier : ComponentTier::kPool;
  }
  // A phase that needs `needed` and prefetches `prefetch` (the service's keep is both), run
  // to the end of its background promotions; the pool stays within its budget.
  PhaseResult Phase(const Lease& lease, const std::vector<std::string>& needed,
                    const std::vector<std::string>& prefetch, bool move = true) {
    std::set<std::string> keep(needed.begin(), needed.end());
    keep.insert(prefetch.begin(), prefetch.end());
    PhaseResult result = prefetcher_->Begin(lease, keep, needed, prefetch, move);
    ExpectWithinBudget();
    prefetcher_->WaitPoolIdle();
    ExpectWithinBudget();
    return result;
  }
  void ExpectWithinBudget() {
    const PoolUsage usage = pool_->Usage();
    EXPECT_LE(usage.reserved_bytes, usage.budget_bytes);
  }

  TempDirForTest dir_;
  std::string path_;
  SessionRegistry registry_;
  std::unique_ptr<HostPool> pool_;
  std::unique_ptr<ComponentStore> store_;
  std::unique_ptr<DeviceTable> table_;
  std::unique_ptr<PhasePrefetcher> prefetcher_;
  Lease lease_{RandomId(), 1234, "test", absl::Now(), DaemonCaller()};
};

TEST_F(PoolPhaseTest, TheDecodePhaseSendsTheTransformerToItsFilesForTheTextEncoder) {
  ASSERT_EQ(TierOf("te"), ComponentTier::kFile);
  ASSERT_EQ(TierOf("transformer"), ComponentTier::kPool);
  PhaseResult decode = Phase(lease_, {"vae"}, {"te"});
  EXPECT_EQ(decode.demoted_bytes, 16 * kMiB);
  EXPECT_EQ(decode.promoting_bytes, 16 * kMiB);
  EXPECT_THAT(decode.notes, Contains(HasSubstr("'transformer': 16.0 MiB to its files")));
  EXPECT_THAT(decode.notes, Contains(HasSubstr("'te': 16.0 MiB read back into the pool")));
  EXPECT_EQ(TierOf("te"), ComponentTier::kPool);
  EXPECT_EQ(TierOf("transformer"), ComponentTier::kFile);

  // The next prompt needs the text encoder, which stays; the transformer gets the free room.
  PhaseResult prompt = Phase(lease_, {"te"}, {"transformer"});
  EXPECT_EQ(prompt.demoted_bytes, 0u);
  EXPECT_EQ(prompt.promoting_bytes, 16 * kMiB);
  EXPECT_EQ(TierOf("te"), ComponentTier::kPool);
  EXPECT_EQ(TierOf("transformer"), ComponentTier::kSplit);
  auto split = store_->Get("transformer", lease_.caller);
  ASSERT_TRUE(split.ok());
  EXPECT_GT(split->pool_bytes, 0u);

  // Denoising needs the transformer, split: the text encoder (unused now) goes to its file
  // and the transformer is read back whole before the phase answers, so that its session
  // finds it in the pool.
  PhaseResult denoise = Phase(lease_, {"transformer"}, {});
  EXPECT_EQ(denoise.demoted_bytes, 16 * kMiB);
  EXPECT_GT(denoise.promoted_bytes, 0u);
  EXPECT_EQ(denoise.promoting_bytes, 0u);
  EXPECT_THAT(denoise.notes, Contains(HasSubstr("read back into the pool for this phase")));
  EXPECT_EQ(TierOf("transformer"), ComponentTier::kPool);
  EXPECT_EQ(TierOf("te"), ComponentTier::kFile);

  // A phase that needs a component in the pool already moves nothing.
  PhaseResult again = Phase(lease_, {"transformer"}, {});
  EXPECT_EQ(again.demoted_bytes, 0u);
  EXPECT_EQ(again.promoted_bytes, 0u);
}

TEST_F(PoolPhaseTest, ANeededComponentBeingPrefetchedIsWaitedForNotReadTwice) {
  // Decode prefetches the text encoder in the background; the next prompt needs it at once.
  PhaseResult decode = prefetcher_->Begin(lease_, {"vae", "te"}, {"vae"}, {"te"});
  EXPECT_EQ(decode.promoting_bytes, 16 * kMiB);
  PhaseResult prompt = Phase(lease_, {"te"}, {});
  EXPECT_EQ(TierOf("te"), ComponentTier::kPool);
  // Read back by one of the two phases, whichever got to it: never both, never neither.
  EXPECT_THAT(prompt.promoted_bytes, ::testing::AnyOf(0u, 16 * kMiB));
}

TEST_F(PoolPhaseTest, KeepPoolBytesLeavesThePoolAsItIs) {
  PhaseResult decode = Phase(lease_, {"vae"}, {"te"}, /*move=*/false);
  EXPECT_EQ(decode.demoted_bytes, 0u);
  EXPECT_EQ(decode.promoting_bytes, 0u);
  EXPECT_EQ(TierOf("te"), ComponentTier::kFile);
  EXPECT_EQ(TierOf("transformer"), ComponentTier::kPool);
}

TEST_F(PoolPhaseTest, AnotherUsersPhaseNeitherMovesNorNamesTheCallersComponents) {
  const Lease bob{RandomId(), 99, "bob", absl::Now(), CallerFromCredentials(4002, 4002, 99)};
  PhaseResult phase = Phase(bob, {"vae"}, {"te"});
  EXPECT_EQ(phase.demoted_bytes, 0u);
  EXPECT_EQ(phase.promoting_bytes, 0u);
  for (const std::string& note : phase.notes) {
    EXPECT_THAT(note, ::testing::Not(HasSubstr("transformer")));
  }
  EXPECT_EQ(TierOf("te"), ComponentTier::kFile);
  EXPECT_EQ(TierOf("transformer"), ComponentTier::kPool);
}

TEST_F(PoolPhaseTest, TheEndOfTheLeaseStopsItsPromotion) {
  prefetcher_->CancelLease(lease_.id);  // nothing runs: a no-op
  PhaseResult decode = prefetcher_->Begin(lease_, {"vae", "te"}, {"vae"}, {"te"});
  prefetcher_->CancelLease(lease_.id);
  prefetcher_->WaitPoolIdle();
  ExpectWithinBudget();
  // Cancelled before or while it read: on its files, or in the pool if it finished first.
  const ComponentTier tier = TierOf("te");
  EXPECT_TRUE(tier == ComponentTier::kFile || tier == ComponentTier::kPool);
  EXPECT_EQ(decode.demoted_bytes, 16 * kMiB);
}

}  // namespace
}  // namespace ddo
