#include "daemon/pool/segment_reserve.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>

#include "absl/time/clock.h"
#include "daemon/common/file_system.h"
#include "daemon/common/random_id.h"
#include "daemon/pool/host_pinning.h"
#include "daemon/pool/host_pool.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ddo {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

PoolOptions Options(uint64_t budget, FileSystem* fs = nullptr) {
  PoolOptions options;
  options.budget_bytes = budget;
  options.name_namespace = PoolNamespace("/tmp/segment-reserve-test-" + RandomId());
  options.populate_threads = 2;
  options.file_system = fs;
  return options;
}

// A reserve that makes its segment at once and never again by itself within a test.
SegmentReserveOptions ReserveOf(uint64_t bytes) {
  SegmentReserveOptions options;
  options.target_bytes = bytes;
  options.refill_delay = absl::Hours(1);
  options.retry_interval = absl::Milliseconds(20);
  return options;
}

// Waits (up to 20 s) until `done` holds.
template <typename Predicate>
bool Eventually(Predicate done) {
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (!done()) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(5));
  }
  return true;
}

uint64_t FileSize(const PoolSegment& segment) {
  struct stat info {};
  if (::stat(SegmentPath(segment.name()).c_str(), &info) != 0) return 0;
  return static_cast<uint64_t>(info.st_size);
}

TEST(SegmentReserveTest, ASegmentIsMadeAfterStartAndCountedApart) {
  HostPool pool(Options(64 * kMiB));
  SegmentReserve reserve(pool, ReserveOf(16 * kMiB));
  EXPECT_EQ(reserve.ready_bytes(), 0u) << "nothing before Start";
  reserve.Start();
  ASSERT_TRUE(Eventually([&] { return reserve.ready_bytes() == 16 * kMiB; }));
  const PoolUsage usage = pool.Usage();
  EXPECT_EQ(usage.reserve_bytes, 16 * kMiB);
  EXPECT_EQ(usage.reserved_bytes, 0u) << "the reserve is not the components' room";
  EXPECT_EQ(usage.segments, 0u);
  EXPECT_TRUE(pool.Fits(64 * kMiB)) << "what the reserve holds counts as free";
  EXPECT_EQ(pool.ListSegmentNames().size(), 1u);
}

TEST(SegmentReserveTest, ATakeIsCutToItsSizeAndTheRestFreed) {
  HostPool pool(Options(64 * kMiB));
  SegmentReserve reserve(pool, ReserveOf(16 * kMiB));
  reserve.Start();
  ASSERT_TRUE(Eventually([&] { return reserve.ready_bytes() > 0; }));
  std::shared_ptr<PoolSegment> taken = reserve.Take(5 * kMiB);
  ASSERT_NE(taken, nullptr);
  EXPECT_TRUE(taken->prefaulted());
  EXPECT_EQ(taken->size(), 6 * kMiB) << "cut to the 2 MiB footprint";
  EXPECT_EQ(FileSize(*taken), 6 * kMiB) << "the pages past it leave /dev/shm";
  std::memset(taken->data(), 0x5a, taken->size());  // every byte of it is mapped
  EXPECT_EQ(taken->data()[taken->size() - 1], 0x5a);
  PoolUsage usage = pool.Usage();
  EXPECT_EQ(usage.reserved_bytes, 6 * kMiB);
  EXPECT_EQ(usage.segments, 1u);
  EXPECT_EQ(usage.reserve_bytes, 0u);
  EXPECT_EQ(reserve.ready_bytes(), 0u);
  EXPECT_EQ(reserve.Take(1), nullptr) << "one segment, taken once";
  taken->MarkDiscarded();
  taken.reset();
  usage = pool.Usage();
  EXPECT_EQ(usage.reserved_bytes, 0u);
  EXPECT_EQ(usage.segments, 0u);
}

TEST(SegmentReserveTest, ALoadLargerThanTheReserveGetsNothingFromIt) {
  HostPool pool(Options(64 * kMiB));
  SegmentReserve reserve(pool, ReserveOf(8 * kMiB));
  reserve.Start();
  ASSERT_TRUE(Eventually([&] { return reserve.ready_bytes() > 0; }));
  EXPECT_EQ(reserve.Take(8 * kMiB + 1), nullptr);
  EXPECT_EQ(reserve.ready_bytes(), 8 * kMiB) << "still ready for the next";
}

TEST(SegmentReserveTest, ASmallLoadGetsNothingFromIt) {
  HostPool pool(Options(64 * kMiB));
  SegmentReserve reserve(pool, ReserveOf(16 * kMiB));
  reserve.Start();
  ASSERT_TRUE(Eventually([&] { return reserve.ready_bytes() > 0; }));
  EXPECT_EQ(reserve.Take(2 * kMiB), nullptr) << "an eighth: a fresh segment serves it";
  EXPECT_EQ(reserve.ready_bytes(), 16 * kMiB);
  std::shared_ptr<PoolSegment> quarter = reserve.Take(4 * kMiB);
  ASSERT_NE(quarter, nullptr);
  quarter->MarkDiscarded();
}

TEST(SegmentReserveTest, AnAllocationThatNeedsTheRoomGetsItFromTheReserve) {
  HostPool pool(Options(32 * kMiB));
  SegmentReserve reserve(pool, ReserveOf(24 * kMiB));
  reserve.Start();
  ASSERT_TRUE(Eventually([&] { return reserve.ready_bytes() > 0; }));
  auto segment = pool.Allocate(16 * kMiB);
  ASSERT_TRUE(segment.ok()) << segment.status();
  EXPECT_EQ(reserve.ready_bytes(), 0u);
  EXPECT_EQ(pool.Usage().reserve_bytes, 0u);
  EXPECT_EQ(pool.Usage().reserved_bytes, 16 * kMiB);
  EXPECT_TRUE(pool.TryHold(16 * kMiB)) << "the budget is whole again";
  pool.ReleaseHold(16 * kMiB);
  (*segment)->MarkDiscarded();
}

TEST(SegmentReserveTest, AnAllocationWhileTheSegmentIsBeingMadeGetsTheRoom) {
  HostPool pool(Options(600 * kMiB));
  SegmentReserve reserve(pool, ReserveOf(512 * kMiB));
  reserve.Start();
  // Populating 512 MiB takes a while: the allocation comes while it runs, or just after.
  ASSERT_TRUE(Eventually([&] { return pool.Usage().reserve_bytes > 0; }));
  auto segment = pool.Allocate(400 * kMiB);
  ASSERT_TRUE(segment.ok()) << segment.status();
  EXPECT_EQ(pool.Usage().reserved_bytes, 400 * kMiB);
  EXPECT_EQ(pool.Usage().reserve_bytes, 0u);
  EXPECT_EQ(pool.ListSegmentNames().size(), 1u) << "the reserve's segment is gone";
  (*segment)->MarkDiscarded();
}

TEST(SegmentReserveTest, AHoldThatNeedsTheRoomGetsItFromTheReserve) {
  HostPool pool(Options(32 * kMiB));
  SegmentReserve reserve(pool, ReserveOf(24 * kMiB));
  reserve.Start();
  ASSERT_TRUE(Eventually([&] { return reserve.ready_bytes() > 0; }));
  EXPECT_TRUE(pool.TryHold(20 * kMiB));
  EXPECT_EQ(pool.Usage().reserve_bytes, 0u);
  EXPECT_FALSE(pool.TryHold(20 * kMiB)) << "the budget itself still holds";
  pool.ReleaseHold(20 * kMiB);
}

TEST(SegmentReserveTest, TheReserveWaitsForRoomAndNeverExceedsTheBudget) {
  HostPool pool(Options(32 * kMiB));
  auto held = pool.Allocate(20 * kMiB);
  ASSERT_TRUE(held.ok());
  SegmentReserve reserve(pool, ReserveOf(16 * kMiB));
  reserve.Start();
  absl::SleepFor(absl::Milliseconds(200));  // several tries
  EXPECT_EQ(reserve.ready_bytes(), 0u);
  EXPECT_EQ(pool.Usage().reserve_bytes, 0u) << "no room: nothing held";
  (*held)->MarkDiscarded();
  held->reset();
  ASSERT_TRUE(Eventually([&] { return reserve.ready_bytes() == 16 * kMiB; }))
      << "made once the room is back";
  EXPECT_LE(pool.Usage().reserved_bytes + pool.Usage().reserve_bytes, 32 * kMiB);
}

TEST(SegmentReserveTest, ItRefillsAfterATake) {
  HostPool pool(Options(64 * kMiB));
  SegmentReserveOptions options = ReserveOf(8 * kMiB);
  options.refill_delay = absl::Milliseconds(10);
  SegmentReserve reserve(pool, options);
  reserve.Start();
  ASSERT_TRUE(Eventually([&] { return reserve.ready_bytes() > 0; }));
  std::shared_ptr<PoolSegment> first = reserve.Take(8 * kMiB);
  ASSERT_NE(first, nullptr);
  ASSERT_TRUE(Eventually([&] { return reserve.ready_bytes() == 8 * kMiB; }));
  std::shared_ptr<PoolSegment> second = reserve.Take(8 * kMiB);
  ASSERT_NE(second, nullptr);
  EXPECT_NE(first->name(), second->name());
  first->MarkDiscarded();
  second->MarkDiscarded();
}

TEST(SegmentReserveTest, ItsSegmentLeavesShmWhenTheReserveGoes) {
  HostPool pool(Options(64 * kMiB));
  {
    SegmentReserve reserve(pool, ReserveOf(8 * kMiB));
    reserve.Start();
    ASSERT_TRUE(Eventually([&] { return reserve.ready_bytes() > 0; }));
    EXPECT_EQ(pool.ListSegmentNames().size(), 1u);
  }
  EXPECT_TRUE(pool.ListSegmentNames().empty()) << "never left for a later ddod to adopt";
  EXPECT_EQ(pool.Usage().reserve_bytes, 0u);
}

TEST(SegmentReserveTest, ATakenSegmentStaysInShmForALaterDdodLikeAnyComponents) {
  HostPool pool(Options(64 * kMiB));
  std::string name;
  {
    SegmentReserve reserve(pool, ReserveOf(8 * kMiB));
    reserve.Start();
    ASSERT_TRUE(Eventually([&] { return reserve.ready_bytes() > 0; }));
    std::shared_ptr<PoolSegment> taken = reserve.Take(8 * kMiB);
    ASSERT_NE(taken, nullptr);
    name = taken->name();
  }  // the component's segment let go without a discard: what a stopping ddod does
  const std::vector<std::string> left = pool.ListSegmentNames();
  ASSERT_EQ(left.size(), 1u);
  EXPECT_EQ(left[0], name);
  absl::StatusOr<std::shared_ptr<PoolSegment>> adopted = pool.Adopt(name);
  ASSERT_TRUE(adopted.ok()) << adopted.status();
  (*adopted)->MarkDiscarded();
}

TEST(SegmentReserveTest, AFullShmLeavesNothingAndIsTriedAgain) {
  FaultInjectingFileSystem fs;
  HostPool pool(Options(64 * kMiB, &fs));
  fs.FailNth(FileOp::kAllocate, ENOSPC);
  SegmentReserve reserve(pool, ReserveOf(8 * kMiB));
  reserve.Start();
  ASSERT_TRUE(Eventually([&] { return reserve.ready_bytes() == 8 * kMiB; }))
      << "the second try finds room";
  EXPECT_EQ(pool.ListSegmentNames().size(), 1u) << "the failed one was removed";
  EXPECT_EQ(pool.Usage().reserve_bytes, 8 * kMiB);
}

TEST(SegmentReserveTest, NoTargetNoReserve) {
  HostPool pool(Options(64 * kMiB));
  SegmentReserve reserve(pool, ReserveOf(0));
  reserve.Start();
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_EQ(pool.Usage().reserve_bytes, 0u);
  EXPECT_EQ(reserve.Take(1), nullptr);
}

// The GPU machine's tests: the reserve is pinned in the background in parts of its grid, a take
// unpins what it cuts off, and a taker's own pinning fills the gaps; elsewhere, nothing is
// pinned and the reserve is as before.
SegmentReserveOptions PinnedReserveOf(uint64_t bytes, uint64_t grid) {
  SegmentReserveOptions options = ReserveOf(bytes);
  options.pin_grid_bytes = grid;
  return options;
}

HostPool PinningPool(uint64_t budget) {
  PoolOptions options = Options(budget);
  options.pin = HostPinningAvailable();
  return HostPool(options);
}

TEST(SegmentReserveGpuTest, TheReserveIsPinnedInItsGridAndATakeUnpinsWhatItCuts) {
  if (!HostPinningAvailable()) GTEST_SKIP() << "no CUDA device: nothing is pinned";
  HostPool pool = PinningPool(64 * kMiB);
  SegmentReserve reserve(pool, PinnedReserveOf(16 * kMiB, 4 * kMiB));
  reserve.Start();
  ASSERT_TRUE(Eventually([&] { return pool.Usage().pinned_bytes == 16 * kMiB; }))
      << "pinned in the background: " << pool.Usage().pinned_bytes;
  EXPECT_EQ(reserve.PinGridFor(10 * kMiB), 4 * kMiB);
  EXPECT_EQ(reserve.PinGridFor(1 * kMiB), 0u) << "too small to be given the reserve";
  std::shared_ptr<PoolSegment> taken = reserve.Take(10 * kMiB);
  ASSERT_NE(taken, nullptr);
  taken->MarkDiscarded();
  EXPECT_EQ(taken->size(), 10 * kMiB);
  EXPECT_EQ(taken->PinnedRanges(), (SegmentExtents{{0, 4 * kMiB}, {4 * kMiB, 4 * kMiB}}))
      << "the part the cut falls in and those past it are unpinned";
  EXPECT_EQ(pool.Usage().pinned_bytes, 8 * kMiB);
  EXPECT_FALSE(taken->pinned());
  ASSERT_TRUE(taken->PinRange(6 * kMiB, 4 * kMiB).ok()) << "only the gap is registered";
  EXPECT_EQ(taken->PinnedRanges(),
            (SegmentExtents{{0, 4 * kMiB}, {4 * kMiB, 4 * kMiB}, {8 * kMiB, 2 * kMiB}}));
  EXPECT_TRUE(taken->pinned());
  EXPECT_EQ(pool.Usage().pinned_bytes, 10 * kMiB);
  taken.reset();
  EXPECT_EQ(pool.Usage().pinned_bytes, 0u);
}

TEST(SegmentReserveGpuTest, ATakeAtAPartBoundaryIsPinnedWithNothingLeftToRegister) {
  if (!HostPinningAvailable()) GTEST_SKIP() << "no CUDA device: nothing is pinned";
  HostPool pool = PinningPool(64 * kMiB);
  SegmentReserve reserve(pool, PinnedReserveOf(16 * kMiB, 4 * kMiB));
  reserve.Start();
  ASSERT_TRUE(Eventually([&] { return pool.Usage().pinned_bytes == 16 * kMiB; }));
  std::shared_ptr<PoolSegment> taken = reserve.Take(8 * kMiB);
  ASSERT_NE(taken, nullptr);
  taken->MarkDiscarded();
  EXPECT_EQ(taken->PinnedRanges(), (SegmentExtents{{0, 4 * kMiB}, {4 * kMiB, 4 * kMiB}}));
  // What the commit of a load or a streamed upload into it does: the component is pinned, as
  // its info and the streaming plan say (run 81 logged it as not pinned).
  ASSERT_TRUE(taken->Pin().ok());
  EXPECT_TRUE(taken->pinned());
  EXPECT_EQ(pool.Usage().pinned_bytes, 8 * kMiB);
}

TEST(SegmentReserveGpuTest, ATensorAcrossTwoPartsHasThemRegisteredAgainAsOne) {
  if (!HostPinningAvailable()) GTEST_SKIP() << "no CUDA device: nothing is pinned";
  HostPool pool = PinningPool(64 * kMiB);
  SegmentReserve reserve(pool, PinnedReserveOf(16 * kMiB, 4 * kMiB));
  reserve.Start();
  ASSERT_TRUE(Eventually([&] { return pool.Usage().pinned_bytes == 16 * kMiB; }));
  std::shared_ptr<PoolSegment> taken = reserve.Take(16 * kMiB);
  ASSERT_NE(taken, nullptr);
  taken->MarkDiscarded();
  // One tensor inside the first part, one from 3 to 9 MiB (across the second part, into the
  // third), one inside the fourth.
  taken->UnpinCrossed({{0, 1 * kMiB}, {3 * kMiB, 6 * kMiB}, {12 * kMiB, 4 * kMiB}});
  EXPECT_EQ(taken->PinnedRanges(), (SegmentExtents{{12 * kMiB, 4 * kMiB}}));
  // The fill's pinning, cut at tensor starts (PinParts), registers the rest.
  ASSERT_TRUE(taken->PinRange(0, 3 * kMiB).ok());
  ASSERT_TRUE(taken->PinRange(3 * kMiB, 9 * kMiB).ok());
  EXPECT_EQ(taken->PinnedRanges(),
            (SegmentExtents{{0, 3 * kMiB}, {3 * kMiB, 9 * kMiB}, {12 * kMiB, 4 * kMiB}}));
  EXPECT_TRUE(taken->pinned());
}

TEST(SegmentReserveGpuTest, AYieldWhilePinningLeavesNothingPinned) {
  if (!HostPinningAvailable()) GTEST_SKIP() << "no CUDA device: nothing is pinned";
  HostPool pool = PinningPool(1024 * kMiB);
  SegmentReserve reserve(pool, PinnedReserveOf(512 * kMiB, 2 * kMiB));
  reserve.Start();
  ASSERT_TRUE(Eventually([&] { return pool.Usage().pinned_bytes > 0; }));
  reserve.Yield();
  EXPECT_EQ(pool.Usage().reserve_bytes, 0u);
  EXPECT_EQ(pool.Usage().pinned_bytes, 0u);
}

}  // namespace
}  // namespace ddo
