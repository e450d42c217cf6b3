#include "daemon/pool/host_pool.h"

#include <sys/mman.h>
#include <sys/stat.h>

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "daemon/common/file_system.h"
#include "daemon/common/random_id.h"
#include "daemon/pool/host_pinning.h"
#include "daemon/session/lease_registry.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ddo {
namespace {

using ::testing::HasSubstr;

PoolOptions Options(uint64_t budget) {
  PoolOptions options;
  options.budget_bytes = budget;
  options.name_namespace = PoolNamespace("/tmp/host-pool-test-" + RandomId());
  return options;
}

TEST(HostPoolTest, SegmentsAreOwnerOnlyRoundedAndCounted) {
  HostPool pool(Options(16ull << 20));
  auto segment = pool.Allocate(3 << 20);
  ASSERT_TRUE(segment.ok()) << segment.status();
  EXPECT_EQ((*segment)->size(), 4u << 20) << "rounded up to 2 MiB";
  EXPECT_THAT((*segment)->name(), ::testing::StartsWith(pool.name_prefix()));
  struct stat info {};
  ASSERT_EQ(::stat(SegmentPath((*segment)->name()).c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0600u);
  EXPECT_EQ(pool.Usage().reserved_bytes, 4u << 20);
  EXPECT_EQ(pool.Usage().segments, 1u);
  EXPECT_FALSE((*segment)->pinned()) << "the host backend never pins";
  (*segment)->MarkDiscarded();
  const std::string path = SegmentPath((*segment)->name());
  segment->reset();
  EXPECT_EQ(pool.Usage().reserved_bytes, 0u);
  EXPECT_FALSE(std::filesystem::exists(path)) << "a discarded segment leaves /dev/shm";
}

TEST(HostPoolTest, TheBudgetIsEnforcedWithSizesInTheMessage) {
  HostPool pool(Options(4ull << 20));
  auto first = pool.Allocate(2 << 20);
  ASSERT_TRUE(first.ok());
  auto second = pool.Allocate(3 << 20);
  ASSERT_FALSE(second.ok());
  EXPECT_TRUE(absl::IsResourceExhausted(second.status()));
  EXPECT_THAT(std::string(second.status().message()), HasSubstr("budget 4.0 MiB"));
  EXPECT_FALSE(pool.Fits(3 << 20));
  EXPECT_TRUE(pool.Fits(2 << 20));
  (*first)->MarkDiscarded();
}

TEST(HostPoolTest, MemoryHeldOutsideThePoolTakesItsPlaceInTheBudget) {
  HostPool pool(Options(8ull << 20));
  auto first = pool.Allocate(2 << 20);
  ASSERT_TRUE(first.ok());
  pool.SetOutsideBytes(4 << 20);
  EXPECT_EQ(pool.Usage().outside_bytes, 4u << 20);
  EXPECT_EQ(pool.Usage().room_bytes(), 4u << 20);
  EXPECT_EQ(pool.Usage().free_bytes(), 2u << 20);
  EXPECT_FALSE(pool.Fits(4 << 20));
  auto refused = pool.Allocate(4 << 20);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("held by ddod and its runners outside the pool 4.0 MiB"));
  EXPECT_FALSE(pool.TryHold(4 << 20)) << "holds share the same room";
  EXPECT_TRUE(pool.TryHold(2 << 20));
  pool.ReleaseHold(2 << 20);
  // More outside than the budget: nothing fits, and what the pool holds stays.
  pool.SetOutsideBytes(64 << 20);
  EXPECT_EQ(pool.Usage().free_bytes(), 0u);
  EXPECT_EQ(pool.Usage().reserved_bytes, 2u << 20);
  EXPECT_FALSE(pool.Fits(1));
  pool.SetOutsideBytes(0);
  EXPECT_TRUE(pool.Allocate(4 << 20).ok()) << "the room comes back with the runners' memory";
  (*first)->MarkDiscarded();
}

// The pre-faulted reserve, as segment_reserve.h holds it: gives its segment back when asked.
class DroppingYielder : public PoolYielder {
 public:
  std::shared_ptr<PoolSegment> held;
  int asked = 0;
  void Yield() override {
    ++asked;
    if (held != nullptr) held->MarkDiscarded();
    held.reset();
  }
};

TEST(HostPoolTest, TheReserveYieldsWhenTheRunnersMemoryNoLongerLeavesItRoom) {
  HostPool pool(Options(8ull << 20));
  DroppingYielder yielder;
  pool.SetYielder(&yielder);
  auto reserve = pool.AllocateReserve(4 << 20, nullptr);
  ASSERT_TRUE(reserve.ok()) << reserve.status();
  yielder.held = *reserve;
  reserve->reset();
  pool.SetOutsideBytes(4 << 20);
  EXPECT_EQ(yielder.asked, 0) << "4 + 4 MiB fit the 8 MiB budget";
  pool.SetOutsideBytes(6 << 20);
  EXPECT_EQ(yielder.asked, 1);
  EXPECT_EQ(pool.Usage().reserve_bytes, 0u);
  pool.SetYielder(nullptr);
}

TEST(HostPoolTest, AllocationCountsItsProgressToTheFootprint) {
  HostPool pool(Options(1ull << 30));
  WorkProgress progress;
  auto segment = pool.Allocate((600ull << 20) + 1, &progress);
  ASSERT_TRUE(segment.ok()) << segment.status();
  EXPECT_EQ(progress.total(), (*segment)->size());
  EXPECT_EQ(progress.done(), (*segment)->size()) << "every reserved byte is counted once";
  (*segment)->MarkDiscarded();
}

TEST(HostPoolTest, ACancelledAllocationLeavesNothingBehind) {
  HostPool pool(Options(1ull << 30));
  WorkProgress progress;
  progress.Cancel();  // the caller hung up before the pages were reserved
  auto segment = pool.Allocate(512ull << 20, &progress);
  ASSERT_FALSE(segment.ok());
  EXPECT_TRUE(absl::IsCancelled(segment.status())) << segment.status();
  EXPECT_EQ(progress.done(), 0u);
  EXPECT_EQ(pool.Usage().reserved_bytes, 0u);
  EXPECT_TRUE(pool.ListSegmentNames().empty()) << "the half-made segment is gone";
}

TEST(HostPoolTest, KeptSegmentsSurviveAndAreAdoptedByTheNextPool) {
  const PoolOptions options = Options(16ull << 20);
  std::string name;
  {
    HostPool pool(options);
    auto segment = pool.Allocate(1 << 20);
    ASSERT_TRUE(segment.ok());
    std::memcpy((*segment)->data(), "warm bytes", 11);
    name = (*segment)->name();
    // Not discarded: this is a ddod going away, keeping the pool warm.
  }
  HostPool next(options);
  EXPECT_THAT(next.ListSegmentNames(), ::testing::Contains(name));
  auto adopted = next.Adopt(name);
  ASSERT_TRUE(adopted.ok()) << adopted.status();
  EXPECT_STREQ((*adopted)->data(), "warm bytes");
  EXPECT_EQ(next.Usage().reserved_bytes, 2u << 20);
  (*adopted)->MarkDiscarded();
}

// A name of the manifest whose file has a second name (a hard link planted in /dev/shm), or
// that is a link, is not a segment ddod made: refused, nothing mapped.
TEST(HostPoolTest, AdoptionRefusesAHardLinkedOrLinkedName) {
  const PoolOptions options = Options(16ull << 20);
  HostPool pool(options);
  auto segment = pool.Allocate(1 << 20);
  ASSERT_TRUE(segment.ok());
  (*segment)->MarkDiscarded();
  const std::string linked = pool.name_prefix() + "hardlinked00000";
  const std::string symbolic = pool.name_prefix() + "symlinked000000";
  ASSERT_EQ(::link(SegmentPath((*segment)->name()).c_str(), SegmentPath(linked).c_str()), 0);
  ASSERT_EQ(::symlink(SegmentPath((*segment)->name()).c_str(), SegmentPath(symbolic).c_str()), 0);
  HostPool next(options);
  EXPECT_EQ(next.Adopt(linked).status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_FALSE(next.Adopt(symbolic).ok());
  EXPECT_EQ(next.Usage().reserved_bytes, 0u);
  ::unlink(SegmentPath(linked).c_str());
  ::unlink(SegmentPath(symbolic).c_str());
}

TEST(HostPoolTest, TwoPoolsNeverShareNames) {
  HostPool a(Options(4 << 20));
  HostPool b(Options(4 << 20));
  EXPECT_NE(a.name_prefix(), b.name_prefix());
}

}  // namespace
}  // namespace ddo

namespace ddo {
namespace {

// Runs everywhere: on the GPU machine it pins for real, elsewhere it checks the refusal.
TEST(HostPoolTest, PinningFollowsTheMachine) {
  PoolOptions options = Options(8ull << 20);
  options.pin = true;
  HostPool pool(options);
  auto segment = pool.Allocate(3 << 20);
  ASSERT_TRUE(segment.ok()) << segment.status();
  (*segment)->MarkDiscarded();
  const absl::Status pinned = (*segment)->Pin();
  if (!HostPinningAvailable()) {
    EXPECT_FALSE(pinned.ok());
    EXPECT_FALSE((*segment)->pinned());
    EXPECT_EQ(pool.Usage().pinned_bytes, 0u);
    return;
  }
  ASSERT_TRUE(pinned.ok()) << pinned;
  EXPECT_TRUE((*segment)->pinned());
  EXPECT_EQ(pool.Usage().pinned_bytes, 4u << 20);
  EXPECT_TRUE((*segment)->Pin().ok()) << "idempotent";
  segment->reset();
  EXPECT_EQ(pool.Usage().pinned_bytes, 0u);
}

}  // namespace
}  // namespace ddo

namespace ddo {
namespace {

// Injected faults while making a segment: the pool refuses with a status that names the
// segment, the operation and the errno, the half-made segment leaves /dev/shm, and the
// accounting is back where it was.
struct CreateFault {
  FileOp op;
  int error_number;
  absl::StatusCode code;
  const char* says;
};

class HostPoolCreateFaultTest : public ::testing::TestWithParam<CreateFault> {};

TEST_P(HostPoolCreateFaultTest, NothingIsLeftAndTheBudgetIsWhole) {
  const CreateFault& fault = GetParam();
  FaultInjectingFileSystem fs;
  PoolOptions options = Options(16ull << 20);
  options.file_system = &fs;
  HostPool pool(options);
  auto kept = pool.Allocate(1 << 20);
  ASSERT_TRUE(kept.ok()) << kept.status();
  (*kept)->MarkDiscarded();
  const PoolUsage before = pool.Usage();

  fs.FailNth(fault.op, fault.error_number);
  auto failed = pool.Allocate(3 << 20);
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), fault.code) << failed.status();
  EXPECT_THAT(std::string(failed.status().message()), HasSubstr(pool.name_prefix()))
      << "names the segment";
  EXPECT_THAT(std::string(failed.status().message()), HasSubstr(fault.says));
  EXPECT_EQ(pool.Usage().reserved_bytes, before.reserved_bytes);
  EXPECT_EQ(pool.Usage().segments, before.segments);
  EXPECT_THAT(pool.ListSegmentNames(), ::testing::ElementsAre((*kept)->name()))
      << "the half-made segment is gone from /dev/shm";
  auto next = pool.Allocate(1 << 20);
  ASSERT_TRUE(next.ok()) << "the next allocation works: " << next.status();
  (*next)->MarkDiscarded();
}

// A segment written through its descriptor: reserved in /dev/shm (no SIGBUS later, a full
// tmpfs refused up front), and what is written through the descriptor is what the mapping
// shows.
TEST(HostPoolTest, AReservedSegmentHoldsItsPagesAndShowsWhatIsWrittenThroughItsDescriptor) {
  HostPool pool(Options(64ull << 20));
  auto segment = pool.Allocate(6 << 20, nullptr, SegmentPages::kReserved);
  ASSERT_TRUE(segment.ok()) << segment.status();
  (*segment)->MarkDiscarded();
  struct stat info {};
  ASSERT_EQ(::stat(SegmentPath((*segment)->name()).c_str(), &info), 0);
  EXPECT_GE(static_cast<uint64_t>(info.st_blocks) * 512, uint64_t{6} << 20)
      << "every page is reserved in /dev/shm";
  auto fd = (*segment)->OpenForWriting();
  ASSERT_TRUE(fd.ok()) << fd.status();
  const std::string bytes(3 << 20, 'x');
  ASSERT_TRUE(pool.file_system().WriteAt(fd->get(), 1 << 20, bytes.data(), bytes.size(), "s").ok());
  EXPECT_EQ((*segment)->data()[0], '\0') << "an unwritten page reads as zeros";
  EXPECT_EQ(std::string((*segment)->data() + (1 << 20), bytes.size()), bytes);
}

TEST(HostPoolTest, AFullShmRefusesAReservedSegmentAndLeavesNothing) {
  FaultInjectingFileSystem fs;
  PoolOptions options = Options(16ull << 20);
  options.file_system = &fs;
  HostPool pool(options);
  fs.FailNth(FileOp::kAllocate, ENOSPC);
  auto failed = pool.Allocate(3 << 20, nullptr, SegmentPages::kReserved);
  EXPECT_TRUE(absl::IsResourceExhausted(failed.status())) << failed.status();
  EXPECT_THAT(std::string(failed.status().message()), HasSubstr("/dev/shm has no room"));
  EXPECT_EQ(pool.Usage().reserved_bytes, 0u);
  EXPECT_TRUE(pool.ListSegmentNames().empty());
}

INSTANTIATE_TEST_SUITE_P(
    EachStep, HostPoolCreateFaultTest,
    ::testing::Values(
        CreateFault{FileOp::kShmOpen, EMFILE, absl::StatusCode::kResourceExhausted,
                    "Too many open files"},
        CreateFault{FileOp::kShmOpen, EACCES, absl::StatusCode::kPermissionDenied,
                    "Permission denied"},
        CreateFault{FileOp::kTruncate, ENOSPC, absl::StatusCode::kResourceExhausted,
                    "to 4194304 bytes: No space left on device"},
        CreateFault{FileOp::kMap, ENOMEM, absl::StatusCode::kResourceExhausted,
                    "Cannot allocate memory"},
        CreateFault{FileOp::kAllocate, ENOSPC, absl::StatusCode::kResourceExhausted,
                    "/dev/shm has no room for 4194304 more bytes"},
        CreateFault{FileOp::kAllocate, ENOSPC, absl::StatusCode::kResourceExhausted,
                    "No space left on device"}));

TEST(HostPoolTest, AFailedShmOpenOnAdoptionLeavesTheSegmentAndTheBudgetAlone) {
  const PoolOptions first = Options(16ull << 20);
  std::string name;
  {
    HostPool pool(first);
    auto segment = pool.Allocate(1 << 20);
    ASSERT_TRUE(segment.ok());
    name = (*segment)->name();
  }
  FaultInjectingFileSystem fs;
  PoolOptions options = first;
  options.file_system = &fs;
  HostPool next(options);
  for (int error_number : {EMFILE, EACCES}) {
    fs.FailNth(FileOp::kShmOpen, error_number);
    auto failed = next.Adopt(name);
    ASSERT_FALSE(failed.ok());
    EXPECT_THAT(std::string(failed.status().message()),
                HasSubstr("shm_open " + name + ": " + std::strerror(error_number)));
    EXPECT_EQ(next.Usage().reserved_bytes, 0u);
    EXPECT_EQ(next.Usage().segments, 0u);
  }
  auto adopted = next.Adopt(name);
  ASSERT_TRUE(adopted.ok()) << "the pool leaves the decision to its caller: " << adopted.status();
  (*adopted)->MarkDiscarded();
}

TEST(HostPoolTest, AnEmptySegmentIsNotMapped) {
  const PoolOptions options = Options(16ull << 20);
  std::string name;
  {
    HostPool pool(options);
    auto segment = pool.Allocate(1 << 20);
    ASSERT_TRUE(segment.ok());
    name = (*segment)->name();
  }
  ASSERT_EQ(::truncate(SegmentPath(name).c_str(), 0), 0);
  HostPool next(options);
  auto adopted = next.Adopt(name);
  EXPECT_TRUE(absl::IsDataLoss(adopted.status())) << adopted.status();
  EXPECT_THAT(std::string(adopted.status().message()), HasSubstr(name + " is empty"));
  EXPECT_EQ(next.Usage().segments, 0u);
  ::shm_unlink(name.c_str());
}

}  // namespace
}  // namespace ddo
