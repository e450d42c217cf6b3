// File: daemon/stream/pool_phase_test.cc
//
// The pool step of a phase (PhasePrefetcher::Begin with PoolPrefetcher): two components
// loaded from files whose sum is more than the pool's budget, in a staged run. A denoising
// phase (PoolStep::kDemoteForRoom) sends the unused text encoder to its files and reads the
// transformer back whole before it answers; a prompt or decode phase (kIntoFreeRoom) moves
// nothing out: the text encoder it needs streams from its files, what it prefetches comes
// back only into free room. The pool never holds more than its budget; another user's phase
// neither moves nor names the caller's components; keep_pool_bytes (kNone) leaves the pool
// alone.
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
  // "big": 25 MiB in 100 units of 256 KiB; with its session margin more than the 28 MiB pool
  // holds whole.
  absl::StatusOr<LoadResult> LoadBig() {
    std::vector<std::pair<std::string, std::string>> tensors;
    for (int i = 0; i < 100; ++i) {
      tensors.emplace_back("block" + std::to_string(i) + ".weight",
                           std::string(256 * kKiB, static_cast<char>(i)));
    }
    const std::string big_path = dir_.Join("big.safetensors");
    if (!WriteU8Safetensors(big_path, tensors)) return absl::InternalError("big not written");
    SafetensorsRequest request;
    request.cache_key = "big";
    request.files.push_back(SourceOf(big_path));
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
                    const std::vector<std::string>& prefetch,
                    PoolStep step = PoolStep::kDemoteForRoom) {
    std::set<std::string> keep(needed.begin(), needed.end());
    keep.insert(prefetch.begin(), prefetch.end());
    PhaseResult result = prefetcher_->Begin(lease, keep, needed, prefetch, step);
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

TEST_F(PoolPhaseTest, ADenoisingPhaseSendsTheTextEncoderToItsFilesForTheTransformer) {
  ASSERT_EQ(TierOf("te"), ComponentTier::kFile);
  ASSERT_EQ(TierOf("transformer"), ComponentTier::kPool);
  // A denoising phase of the text encoder's (as a pipeline that denoises with it would run):
  // the transformer, unused, goes to its files and the text encoder is read back whole.
  PhaseResult first = Phase(lease_, {"te"}, {});
  EXPECT_EQ(first.demoted_bytes, 16 * kMiB);
  EXPECT_THAT(first.notes, Contains(HasSubstr("'transformer': 16.0 MiB to its files")));
  EXPECT_EQ(TierOf("te"), ComponentTier::kPool);
  EXPECT_EQ(TierOf("transformer"), ComponentTier::kFile);

  // The transformer's denoising phase: the text encoder (unused now) goes to its file and the
  // transformer is read back whole before the phase answers, so that its session finds it
  // in the pool.
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

TEST_F(PoolPhaseTest, ADenoisingPhaseReadsBackWhatFitsOfAComponentLargerThanItsRoom) {
  // 25 MiB: with its session margin, more than the 28 MiB pool can hold whole.
  ASSERT_TRUE(LoadBig().ok());
  Phase(lease_, {"transformer"}, {});  // the big one goes to its file for the transformer
  ASSERT_EQ(TierOf("big"), ComponentTier::kFile);

  // A prompt phase needing it streams it from its files: not whole, so not at all.
  PhaseResult prompt = Phase(lease_, {"big"}, {}, PoolStep::kIntoFreeRoom);
  EXPECT_EQ(prompt.promoted_bytes, 0u);
  EXPECT_EQ(TierOf("big"), ComponentTier::kFile);

  // A denoising phase needing it: the others go to their files, and what the room holds of
  // it comes back before the phase answers (split); the rest streams from its file.
  PhaseResult denoise = Phase(lease_, {"big"}, {});
  EXPECT_EQ(denoise.demoted_bytes, 16 * kMiB);
  EXPECT_GT(denoise.promoted_bytes, 0u);
  EXPECT_LT(denoise.promoted_bytes, 25 * kMiB);
  EXPECT_EQ(TierOf("big"), ComponentTier::kSplit);

  // The next denoising phase finds it as it was: nothing more fits, nothing moves.
  PhaseResult again = Phase(lease_, {"big"}, {});
  EXPECT_EQ(again.demoted_bytes, 0u);
  EXPECT_EQ(again.promoted_bytes, 0u);
  EXPECT_THAT(again.notes, Contains(HasSubstr("the pool has no room for more of it")));
}

TEST_F(PoolPhaseTest, ADenoisingPhaseDemotesNothingThatWouldNotLetTheSplitGrow) {
  ASSERT_TRUE(LoadBig().ok());
  Phase(lease_, {"transformer"}, {});
  Phase(lease_, {"big"}, {});  // split: most of the pool is its part now
  ASSERT_EQ(TierOf("big"), ComponentTier::kSplit);
  // A small component loaded into what room is left.
  const std::string small_path = dir_.Join("small.safetensors");
  ASSERT_TRUE(WriteU8Safetensors(small_path, {{"w", std::string(kMiB, 's')}}));
  SafetensorsRequest small;
  small.cache_key = "small";
  small.files.push_back(SourceOf(small_path));
  ASSERT_TRUE(store_->LoadSafetensors(lease_, std::move(small), [](uint64_t, uint64_t) {},
                                      [] { return false; }).ok());
  ASSERT_EQ(TierOf("small"), ComponentTier::kPool);
  ASSERT_EQ(TierOf("big"), ComponentTier::kSplit);

  // Its room would not let the split grow (its pool part stays until a new segment replaces
  // it): the small one stays where it is.
  PhaseResult denoise = Phase(lease_, {"big"}, {});
  EXPECT_EQ(denoise.demoted_bytes, 0u);
  EXPECT_EQ(denoise.promoted_bytes, 0u);
  EXPECT_EQ(TierOf("small"), ComponentTier::kPool);
  EXPECT_THAT(denoise.notes, Contains(HasSubstr(
      "'big': your other components stay in the pool (their room would not let more of it in)")));
}

TEST_F(PoolPhaseTest, PromptAndDecodePhasesLeaveTheTransformerInThePool) {
  // Decode prefetches the text encoder for the next prompt: only into free room, the
  // transformer stays (its re-read would cost the next denoising phase more than reading the
  // text encoder from its file once costs the prompt).
  PhaseResult decode = Phase(lease_, {"vae"}, {"te"}, PoolStep::kIntoFreeRoom);
  EXPECT_EQ(decode.demoted_bytes, 0u);
  EXPECT_THAT(decode.notes, Contains(HasSubstr("'te': up to 16.0 MiB read back")));
  EXPECT_EQ(TierOf("transformer"), ComponentTier::kPool);
  EXPECT_NE(TierOf("te"), ComponentTier::kPool);  // 16 MiB do not fit the 12 MiB free

  // The prompt needs the text encoder: it streams from its files (whole or not at all).
  PhaseResult prompt = Phase(lease_, {"te"}, {"transformer"}, PoolStep::kIntoFreeRoom);
  EXPECT_EQ(prompt.demoted_bytes, 0u);
  EXPECT_EQ(prompt.promoted_bytes, 0u);
  EXPECT_THAT(prompt.notes, Contains(HasSubstr("'te' streams from its files in this phase")));
  EXPECT_EQ(TierOf("transformer"), ComponentTier::kPool);

  // The denoising phase finds the transformer where it was: nothing moves.
  PhaseResult denoise = Phase(lease_, {"transformer"}, {});
  EXPECT_EQ(denoise.demoted_bytes, 0u);
  EXPECT_EQ(denoise.promoted_bytes, 0u);
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
  PhaseResult decode = Phase(lease_, {"vae"}, {"te"}, PoolStep::kNone);
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
