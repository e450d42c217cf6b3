// The store's moves between the pool and the files (component_store_tiering.cc): a load into
// the pool keeps its descriptors, MakeRoomLocked demotes it to them before it discards
// anything, DemoteForRoom demotes a caller's own components, and Promote reads one back,
// whole or in part. After every step the pool holds no more than its budget and the bytes
// read through the component equal the files.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "daemon/common/random_id.h"
#include "daemon/common/temp_dir_for_test.h"
#include "daemon/store/component_store.h"
#include "daemon/store/safetensors_for_test.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ddo {
namespace {

constexpr uint64_t kKiB = 1 << 10;
constexpr uint64_t kMiB = 1 << 20;
constexpr int kTensors = 64;  // of 256 KiB: 16 MiB, a 16 MiB segment

// A user of a shared ddod, not an admin.
Lease LeaseOf(uid_t uid) {
  return Lease{RandomId(), 10 + static_cast<int64_t>(uid), "user", absl::Now(),
               CallerFromCredentials(uid, uid, 10 + static_cast<pid_t>(uid))};
}

class TieringStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    pool_options_.budget_bytes = 28 * kMiB;  // one component and a part of another
    pool_options_.name_namespace = PoolNamespace(dir_.Join("sock"));
    std::vector<std::pair<std::string, std::string>> tensors;
    for (int i = 0; i < kTensors; ++i) {
      std::string bytes(256 * kKiB, '\0');
      for (size_t b = 0; b < bytes.size(); ++b) bytes[b] = static_cast<char>((b * 7 + i * 13) & 0xff);
      tensors.emplace_back("layer" + std::to_string(i) + ".weight", std::move(bytes));
    }
    payloads_ = tensors;
    path_ = dir_.Join("model.safetensors");
    ASSERT_TRUE(WriteU8Safetensors(path_, tensors));
    Restart();
  }
  void TearDown() override {
    store_->Close(/*discard=*/true);
    store_.reset();
    reserve_.reset();
  }
  void Restart() {
    if (store_ != nullptr) store_->Close(/*discard=*/false);
    store_.reset();
    reserve_.reset();
    registry_ = std::make_unique<SessionRegistry>();
    pool_ = std::make_unique<HostPool>(pool_options_);
    StoreOptions options{dir_.Join("manifest.json"), 2};
    options.max_backing_files_per_uid = max_backing_files_per_uid_;
    options.file_system = &fs_;
    if (reserve_bytes_ > 0) {
      SegmentReserveOptions reserve;
      reserve.target_bytes = reserve_bytes_;
      reserve.refill_delay = absl::ZeroDuration();
      reserve.retry_interval = absl::Milliseconds(10);
      reserve_ = std::make_unique<SegmentReserve>(*pool_, reserve);
      options.reserve = reserve_.get();
    }
    store_ = std::make_unique<ComponentStore>(*pool_, *registry_, options);
    store_->AdoptPrevious();
    if (reserve_ != nullptr) reserve_->Start();
  }
  // Waits (up to 20 s) for the pre-faulted reserve to have a segment ready.
  bool ReserveReady() {
    const absl::Time deadline = absl::Now() + absl::Seconds(20);
    while (reserve_->ready_bytes() == 0) {
      if (absl::Now() > deadline) return false;
      absl::SleepFor(absl::Milliseconds(5));
    }
    return true;
  }
  // Whether `key`'s own segment came from the pre-faulted reserve.
  bool InPrefaultedSegment(const std::string& key) {
    auto attached = store_->AttachHost(lease_, key);
    EXPECT_TRUE(attached.ok()) << attached.status();
    if (!attached.ok()) return false;
    const bool prefaulted = attached->bytes.own() != nullptr && attached->bytes.own()->prefaulted();
    EXPECT_TRUE(store_->Detach(attached->session_id, lease_.caller).ok());
    return prefaulted;
  }
  absl::StatusOr<LoadResult> Load(const std::string& key, const Lease* lease = nullptr) {
    SafetensorsRequest request;
    request.cache_key = key;
    request.files.push_back(SourceOf(path_));
    absl::StatusOr<LoadResult> loaded = store_->LoadSafetensors(
        lease != nullptr ? *lease : lease_, std::move(request), [](uint64_t, uint64_t) {},
        [] { return false; });
    ExpectWithinBudget();
    return loaded;
  }
  ComponentTier TierOf(const std::string& key, const Caller& caller = DaemonCaller()) {
    auto got = store_->Get(key, caller);
    EXPECT_TRUE(got.ok()) << got.status();
    return got.ok() ? got->tier : ComponentTier::kPool;
  }
  void ExpectWithinBudget() {
    const PoolUsage usage = pool_->Usage();
    EXPECT_LE(usage.reserved_bytes + usage.reserve_bytes, usage.budget_bytes);
    EXPECT_LE(usage.pinned_bytes, usage.reserved_bytes);
  }
  // Every tensor of `key`, read where the component has it now, equals the file's.
  void ExpectBytesEqualTheFiles(const std::string& key) {
    auto attached = store_->AttachHost(lease_, key);
    ASSERT_TRUE(attached.ok()) << attached.status();
    const std::vector<TensorEntry>& tensors = attached->component.tensors;
    ASSERT_EQ(tensors.size(), payloads_.size());
    for (size_t i = 0; i < tensors.size(); ++i) {
      std::string got(tensors[i].byte_size, '\0');
      if (attached->bytes.InFile(i)) {
        ASSERT_TRUE(attached->bytes.ReadTensor(i, got.data()).ok());
      } else {
        std::memcpy(got.data(), attached->bytes.DataOf(tensors[i]), got.size());
      }
      ASSERT_TRUE(got == payloads_[i].second) << key << " tensor " << i;
    }
    ASSERT_TRUE(store_->Detach(attached->session_id, lease_.caller).ok());
  }

  TempDirForTest dir_;
  FaultInjectingFileSystem fs_;  // the store's reads
  std::string path_;
  std::vector<std::pair<std::string, std::string>> payloads_;
  PoolOptions pool_options_;
  size_t max_backing_files_per_uid_ = 256;
  uint64_t reserve_bytes_ = 0;  // a pre-faulted reserve of this size, when not 0
  std::unique_ptr<SessionRegistry> registry_;
  std::unique_ptr<HostPool> pool_;
  std::unique_ptr<SegmentReserve> reserve_;
  std::unique_ptr<ComponentStore> store_;
  Lease lease_{RandomId(), 1234, "test", absl::Now(), DaemonCaller()};
};

TEST_F(TieringStoreTest, ALoadIntoThePoolKeepsItsFilesAndStaysInTheManifest) {
  auto loaded = Load("a");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->component.tier, ComponentTier::kPool);
  EXPECT_EQ(loaded->component.file_bytes, 0u);
  EXPECT_EQ(store_->Stats().backing_files, 1u);
  // Adopted after a restart, without files: it can only be discarded then.
  Restart();
  EXPECT_EQ(TierOf("a"), ComponentTier::kPool);
  EXPECT_EQ(store_->Stats().backing_files, 0u);
  ExpectBytesEqualTheFiles("a");
}

TEST_F(TieringStoreTest, MakingRoomDemotesBeforeItDiscards) {
  ASSERT_TRUE(Load("a").ok());
  auto b = Load("b");
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->component.tier, ComponentTier::kPool);
  // "a" went to its files, still READY; nothing was evicted.
  EXPECT_EQ(TierOf("a"), ComponentTier::kFile);
  EXPECT_EQ(store_->Stats().evictions, 0u);
  EXPECT_EQ(store_->Stats().components, 2u);
  EXPECT_EQ(pool_->Usage().reserved_bytes, 16 * kMiB);
  ExpectBytesEqualTheFiles("a");
  ExpectBytesEqualTheFiles("b");
  // A demoted component is not in the manifest: a restart adopts "b" only.
  Restart();
  EXPECT_TRUE(absl::IsNotFound(store_->Get("a", DaemonCaller()).status()));
  EXPECT_EQ(TierOf("b"), ComponentTier::kPool);
}

TEST_F(TieringStoreTest, PastTheDescriptorLimitALoadKeepsNoFilesAndIsDiscarded) {
  max_backing_files_per_uid_ = 0;
  Restart();
  const Lease user = LeaseOf(4242);
  ASSERT_TRUE(Load("a", &user).ok());
  EXPECT_EQ(store_->Stats().backing_files, 0u);
  ASSERT_TRUE(Load("b", &user).ok());
  EXPECT_TRUE(absl::IsNotFound(store_->Get("a", user.caller).status()));
  EXPECT_EQ(store_->Stats().evictions, 1u);
}

TEST_F(TieringStoreTest, PromoteReadsBackInPartThenWhole) {
  ASSERT_TRUE(Load("a").ok());
  ASSERT_TRUE(Load("b").ok());  // "a" demoted
  // With "b" in the pool, only a part of "a" fits (and a margin for sessions stays free).
  auto moved = store_->Promote("a", DaemonCaller(), [] { return false; });
  ASSERT_TRUE(moved.ok()) << moved.status();
  EXPECT_GT(*moved, 4 * kMiB);
  EXPECT_LT(*moved, 12 * kMiB);
  ExpectWithinBudget();
  auto split = store_->Get("a", DaemonCaller());
  ASSERT_TRUE(split.ok());
  EXPECT_EQ(split->tier, ComponentTier::kSplit);
  EXPECT_EQ(split->pool_bytes, *moved);
  ExpectBytesEqualTheFiles("a");
  // The caller makes room (its own "b" goes to its files), then all of "a" comes back: its
  // pool part goes first, since the whole and the part would not fit together.
  auto demoted = store_->DemoteForRoom(DaemonCaller(), 22 * kMiB, {"a"});
  ASSERT_EQ(demoted.size(), 1u);
  EXPECT_EQ(demoted[0].cache_key, "b");
  EXPECT_EQ(demoted[0].bytes, 16 * kMiB);
  EXPECT_EQ(TierOf("b"), ComponentTier::kFile);
  moved = store_->Promote("a", DaemonCaller(), [] { return false; });
  ASSERT_TRUE(moved.ok()) << moved.status();
  ExpectWithinBudget();
  auto whole = store_->Get("a", DaemonCaller());
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ(whole->tier, ComponentTier::kPool);
  EXPECT_EQ(whole->file_bytes, 0u);
  EXPECT_EQ(whole->segments.size(), 1u);
  EXPECT_EQ(pool_->Usage().reserved_bytes, 16 * kMiB) << "the split part was replaced";
  ExpectBytesEqualTheFiles("a");
  // In the pool again: nothing more to promote, and it is in the manifest once more.
  EXPECT_EQ(*store_->Promote("a", DaemonCaller(), [] { return false; }), 0u);
  Restart();
  EXPECT_EQ(TierOf("a"), ComponentTier::kPool);
  ExpectBytesEqualTheFiles("a");
}

TEST_F(TieringStoreTest, LoadsAndPromotionsReadIntoThePrefaultedReserveWithinTheBudget) {
  // Two components and a session margin (4.75 MiB), or one, the reserve and the margin.
  pool_options_.budget_bytes = 38 * kMiB;
  reserve_bytes_ = 16 * kMiB;
  Restart();
  ASSERT_TRUE(ReserveReady());
  // Cold: read past the page cache (direct_fill.h) where the file system allows it.
  const int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  ::fsync(fd);  // written pages are dropped only once clean
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
  ASSERT_TRUE(Load("a").ok());
  EXPECT_TRUE(InPrefaultedSegment("a"));
  ExpectBytesEqualTheFiles("a");
  ASSERT_TRUE(ReserveReady()) << "made again in the room left";
  ASSERT_TRUE(Load("b").ok());
  EXPECT_TRUE(InPrefaultedSegment("b"));
  EXPECT_EQ(pool_->Usage().reserve_bytes, 0u) << "no room for another";
  // "a" goes to its files; the room it leaves is the reserve's until "a" is read back.
  ASSERT_EQ(store_->DemoteForRoom(DaemonCaller(), 16 * kMiB, {"b"}).size(), 1u);
  ASSERT_TRUE(ReserveReady());
  ExpectWithinBudget();
  auto moved = store_->Promote("a", DaemonCaller(), [] { return false; });
  ASSERT_TRUE(moved.ok()) << moved.status();
  EXPECT_EQ(*moved, 16 * kMiB);
  EXPECT_EQ(TierOf("a"), ComponentTier::kPool);
  EXPECT_TRUE(InPrefaultedSegment("a"));
  ExpectBytesEqualTheFiles("a");
  ExpectBytesEqualTheFiles("b");
  ExpectWithinBudget();
  // Loads that find the reserve too small or gone still work, from fresh segments.
  ASSERT_TRUE(Load("c").ok());  // makes room by demoting
  ExpectBytesEqualTheFiles("c");
}

TEST_F(TieringStoreTest, AWholeOnlyPromotionWithoutRoomForAllMovesNothing) {
  ASSERT_TRUE(Load("a").ok());
  ASSERT_TRUE(Load("b").ok());  // "a" demoted; only a part of it would fit beside "b"
  auto moved = store_->Promote("a", DaemonCaller(), [] { return false; }, /*whole_only=*/true);
  ASSERT_TRUE(moved.ok()) << moved.status();
  EXPECT_EQ(*moved, 0u);
  EXPECT_EQ(TierOf("a"), ComponentTier::kFile);
  // With room made, all of it.
  ASSERT_EQ(store_->DemoteForRoom(DaemonCaller(), 22 * kMiB, {"a"}).size(), 1u);
  moved = store_->Promote("a", DaemonCaller(), [] { return false; }, /*whole_only=*/true);
  ASSERT_TRUE(moved.ok()) << moved.status();
  EXPECT_EQ(*moved, 16 * kMiB);
  EXPECT_EQ(TierOf("a"), ComponentTier::kPool);
  ExpectBytesEqualTheFiles("a");
}

TEST_F(TieringStoreTest, ASplitComponentInUseGrowsItsPoolPartByACopyAndARead) {
  ASSERT_TRUE(Load("a").ok());
  ASSERT_TRUE(Load("b").ok());  // "a" demoted
  auto first = store_->Promote("a", DaemonCaller(), [] { return false; });
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_EQ(store_->DemoteForRoom(DaemonCaller(), 28 * kMiB, {"a"}).size(), 1u);
  // In use, its pool part cannot go first: the new segment holds that part (copied from the
  // old segment) and more units (read from the file), and replaces it.
  auto attached = store_->AttachHost(lease_, "a");
  ASSERT_TRUE(attached.ok());
  auto second = store_->Promote("a", DaemonCaller(), [] { return false; });
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_GT(*second, 0u);
  ExpectWithinBudget();
  auto grown = store_->Get("a", DaemonCaller());
  ASSERT_TRUE(grown.ok());
  EXPECT_EQ(grown->tier, ComponentTier::kSplit);
  EXPECT_EQ(grown->pool_bytes, *first + *second);
  ASSERT_TRUE(store_->Detach(attached->session_id, lease_.caller).ok());
  ExpectBytesEqualTheFiles("a");
}

TEST_F(TieringStoreTest, ASessionAttachedDuringAPromotionKeepsWhatItAttached) {
  ASSERT_TRUE(Load("a").ok());
  ASSERT_TRUE(Load("b").ok());  // "a" demoted
  auto demoted = store_->DemoteForRoom(DaemonCaller(), 28 * kMiB, {"a"});
  ASSERT_EQ(demoted.size(), 1u);
  auto attached = store_->AttachHost(lease_, "a");
  ASSERT_TRUE(attached.ok());
  EXPECT_EQ(attached->component.tier, ComponentTier::kFile);
  // In use: never demoted, but it may be promoted; the session keeps reading its files.
  EXPECT_TRUE(store_->DemoteForRoom(DaemonCaller(), 28 * kMiB, {}).empty());
  auto moved = store_->Promote("a", DaemonCaller(), [] { return false; });
  ASSERT_TRUE(moved.ok()) << moved.status();
  EXPECT_EQ(*moved, 16 * kMiB);
  EXPECT_TRUE(attached->bytes.InFile(0));
  std::string got(256 * kKiB, '\0');
  ASSERT_TRUE(attached->bytes.ReadTensor(0, got.data()).ok());
  EXPECT_TRUE(got == payloads_[0].second);
  EXPECT_EQ(TierOf("a"), ComponentTier::kPool);  // the next attach sees the pool
  ASSERT_TRUE(store_->Detach(attached->session_id, lease_.caller).ok());
  ExpectBytesEqualTheFiles("a");
}

TEST_F(TieringStoreTest, APhaseCallerDemotesAndPromotesOnlyItsOwnComponents) {
  const Lease alice = LeaseOf(4001);
  const Lease bob = LeaseOf(4002);
  ASSERT_TRUE(Load("a", &alice).ok());
  EXPECT_TRUE(store_->DemoteForRoom(bob.caller, 28 * kMiB, {}).empty());
  EXPECT_EQ(TierOf("a", alice.caller), ComponentTier::kPool);
  EXPECT_TRUE(absl::IsNotFound(
      store_->Promote("a", bob.caller, [] { return false; }).status()));
  EXPECT_EQ(store_->PromotionBytes("a", bob.caller).bytes, 0u);
}

TEST_F(TieringStoreTest, ACancelledPromotionLeavesTheComponentOnItsFiles) {
  ASSERT_TRUE(Load("a").ok());
  ASSERT_TRUE(Load("b").ok());
  ASSERT_EQ(store_->DemoteForRoom(DaemonCaller(), 28 * kMiB, {"a"}).size(), 1u);
  auto moved = store_->Promote("a", DaemonCaller(), [] { return true; });
  EXPECT_TRUE(absl::IsCancelled(moved.status())) << moved.status();
  EXPECT_EQ(TierOf("a"), ComponentTier::kFile);
  EXPECT_EQ(pool_->Usage().reserved_bytes, 0u);
  // Not left marked as promoting: a later promotion runs.
  moved = store_->Promote("a", DaemonCaller(), [] { return false; });
  ASSERT_TRUE(moved.ok()) << moved.status();
  EXPECT_EQ(TierOf("a"), ComponentTier::kPool);
}

TEST_F(TieringStoreTest, AFailedReadLeavesTheComponentOnItsFilesAndReleasesTheSegment) {
  ASSERT_TRUE(Load("a").ok());
  ASSERT_TRUE(Load("b").ok());
  ASSERT_EQ(store_->DemoteForRoom(DaemonCaller(), 28 * kMiB, {"a"}).size(), 1u);
  fs_.FailAlways(FileOp::kRead, EIO);
  auto moved = store_->Promote("a", DaemonCaller(), [] { return false; });
  EXPECT_FALSE(moved.ok());
  fs_.Heal();
  EXPECT_EQ(TierOf("a"), ComponentTier::kFile);
  EXPECT_EQ(pool_->Usage().reserved_bytes, 0u);
  ExpectBytesEqualTheFiles("a");
  moved = store_->Promote("a", DaemonCaller(), [] { return false; });
  ASSERT_TRUE(moved.ok()) << moved.status();
  EXPECT_EQ(TierOf("a"), ComponentTier::kPool);
}

TEST_F(TieringStoreTest, AComponentReadBackFromItsFilesIsNeverSharedByProof) {
  const Lease alice = LeaseOf(4001);
  const Lease bob = LeaseOf(4002);
  ASSERT_TRUE(Load("x", &alice).ok());
  ASSERT_EQ(store_->DemoteForRoom(alice.caller, 28 * kMiB, {}).size(), 1u);
  ASSERT_TRUE(store_->Promote("x", alice.caller, [] { return false; }).ok());
  ASSERT_EQ(TierOf("x", alice.caller), ComponentTier::kPool);
  // Its bytes came from files alice could have changed after her load: bob's load of the
  // same files gets a copy of its own (alice's, unused, goes to her file to make room).
  auto loaded = Load("x", &bob);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_FALSE(loaded->warm_hit);
  EXPECT_EQ(TierOf("x", bob.caller), ComponentTier::kPool);
  EXPECT_EQ(TierOf("x", alice.caller), ComponentTier::kFile);
}

TEST_F(TieringStoreTest, AnIdleDemotedComponentIsEvictedAndClosesItsFiles) {
  ASSERT_TRUE(Load("a").ok());
  ASSERT_TRUE(Load("b").ok());  // "a" demoted
  EXPECT_EQ(store_->Stats().backing_files, 2u);
  EXPECT_EQ(store_->EvictIdle(absl::Now() + absl::Hours(1), absl::Minutes(1)),
            (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(store_->Stats().backing_files, 0u);
  EXPECT_EQ(pool_->Usage().reserved_bytes, 0u);
}

}  // namespace
}  // namespace ddo
