// File: daemon/pool/range_pinner_test.cc
#include "daemon/pool/range_pinner.h"

#include <ostream>
#include <thread>
#include <vector>

#include "daemon/common/random_id.h"
#include "daemon/pool/host_pinning.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ddo {

// For the matchers (found by argument-dependent lookup).
bool operator==(const ByteRange& a, const ByteRange& b) {
  return a.offset == b.offset && a.bytes == b.bytes;
}
std::ostream& operator<<(std::ostream& out, const ByteRange& range) {
  return out << "[" << range.offset << "+" << range.bytes << "]";
}

namespace {

using ::testing::ElementsAre;

constexpr uint64_t kMiB = uint64_t{1} << 20;

TEST(PinPartsTest, PartsCoverTheSegmentAndCutOnlyAtExtentStarts) {
  // Extents given out of order; 3 MiB each, with 1 MiB gaps.
  const std::vector<ByteRange> extents = {
      {8 * kMiB, 3 * kMiB}, {0, 3 * kMiB}, {4 * kMiB, 3 * kMiB}, {12 * kMiB, 3 * kMiB}};
  std::vector<size_t> part_of;
  const std::vector<ByteRange> parts = PinParts(extents, 16 * kMiB, 6 * kMiB, &part_of);
  EXPECT_THAT(parts, ElementsAre(ByteRange{0, 8 * kMiB}, ByteRange{8 * kMiB, 8 * kMiB}));
  EXPECT_THAT(part_of, ElementsAre(1u, 0u, 0u, 1u));
}

TEST(PinPartsTest, AnExtentLargerThanThePartSizeIsAPartOfItsOwn) {
  const std::vector<ByteRange> extents = {{0, kMiB}, {kMiB, 10 * kMiB}, {11 * kMiB, kMiB}};
  std::vector<size_t> part_of;
  const std::vector<ByteRange> parts = PinParts(extents, 14 * kMiB, 2 * kMiB, &part_of);
  // A part ends at an extent's start only once it is big enough: [0, 1 MiB) is not, so the
  // big extent joins it; the part after the big extent starts at the next extent.
  EXPECT_THAT(parts, ElementsAre(ByteRange{0, 11 * kMiB}, ByteRange{11 * kMiB, 3 * kMiB}));
  EXPECT_THAT(part_of, ElementsAre(0u, 0u, 1u));
}

// Tensors start on 256-byte boundaries inside a unit: a part may only end where a page
// starts, or two registrations would share a page.
TEST(PinPartsTest, PartsEndOnlyWherePagesStart) {
  const std::vector<ByteRange> extents = {{0, 3 * kMiB + 100}, {3 * kMiB + 256, kMiB},
                                          {5 * kMiB, kMiB}};
  std::vector<size_t> part_of;
  const std::vector<ByteRange> parts = PinParts(extents, 8 * kMiB, 2 * kMiB, &part_of);
  EXPECT_THAT(parts, ElementsAre(ByteRange{0, 5 * kMiB}, ByteRange{5 * kMiB, 3 * kMiB}));
  EXPECT_THAT(part_of, ElementsAre(0u, 0u, 1u));
}

TEST(PinPartsTest, NoExtentsIsOnePartOfTheWholeSegment) {
  EXPECT_THAT(PinParts({}, 4 * kMiB, kMiB), ElementsAre(ByteRange{0, 4 * kMiB}));
}

PoolOptions PinningOptions(uint64_t budget) {
  PoolOptions options;
  options.budget_bytes = budget;
  options.name_namespace = PoolNamespace("/tmp/range-pinner-test-" + RandomId());
  options.pin = true;
  return options;
}

// Parts are pinned as their bytes arrive, from many threads at once; together they pin the
// segment, and Pin has nothing left to do. Without CUDA every pinning fails, and Finish says
// so while the segment stays unpinned and counted as such.
TEST(RangePinnerTest, PartsArePinnedAsTheirBytesArriveFromManyThreads) {
  HostPool pool(PinningOptions(64 * kMiB));
  auto segment = pool.Allocate(16 * kMiB, nullptr, SegmentPages::kReserved);
  ASSERT_TRUE(segment.ok()) << segment.status();
  (*segment)->MarkDiscarded();
  const std::vector<ByteRange> parts = {{0, 4 * kMiB}, {4 * kMiB, 4 * kMiB}, {8 * kMiB, 8 * kMiB}};
  absl::Status finished;
  {
    RangePinner pinner(**segment, parts, {4 * kMiB, 4 * kMiB, 6 * kMiB});
    std::vector<std::thread> writers;
    for (int t = 0; t < 4; ++t) {
      writers.emplace_back([&, t] {
        for (size_t part = 0; part < parts.size(); ++part) {
          pinner.Written(part, part == 2 ? 1536 * 1024 : kMiB);  // a quarter each
        }
        (void)t;
      });
    }
    for (std::thread& writer : writers) writer.join();
    finished = pinner.Finish();
  }
  if (!HostPinningAvailable()) {
    EXPECT_FALSE(finished.ok());
    EXPECT_FALSE((*segment)->pinned());
    EXPECT_EQ(pool.Usage().pinned_bytes, 0u);
    return;
  }
  ASSERT_TRUE(finished.ok()) << finished;
  EXPECT_TRUE((*segment)->pinned());
  EXPECT_EQ(pool.Usage().pinned_bytes, 16 * kMiB);
  EXPECT_TRUE((*segment)->Pin().ok());
  segment->reset();
  EXPECT_EQ(pool.Usage().pinned_bytes, 0u);
}

// A load that fails half-way: the pinner goes with the parts written so far pinned, Pin
// covers the rest, and the pool's count follows the segment.
TEST(RangePinnerTest, PinCoversWhatThePinnerLeft) {
  if (!HostPinningAvailable()) GTEST_SKIP() << "no CUDA device: nothing can be pinned";
  HostPool pool(PinningOptions(64 * kMiB));
  auto segment = pool.Allocate(8 * kMiB, nullptr, SegmentPages::kReserved);
  ASSERT_TRUE(segment.ok()) << segment.status();
  (*segment)->MarkDiscarded();
  {
    RangePinner pinner(**segment, {{0, 2 * kMiB}, {2 * kMiB, 6 * kMiB}}, {2 * kMiB, 6 * kMiB});
    pinner.Written(0, 2 * kMiB);
    ASSERT_TRUE(pinner.Finish().ok());
  }
  EXPECT_FALSE((*segment)->pinned());
  EXPECT_EQ(pool.Usage().pinned_bytes, 2 * kMiB);
  ASSERT_TRUE((*segment)->Pin().ok());
  EXPECT_TRUE((*segment)->pinned());
  EXPECT_EQ(pool.Usage().pinned_bytes, 8 * kMiB);
  segment->reset();
  EXPECT_EQ(pool.Usage().pinned_bytes, 0u);
}

}  // namespace
}  // namespace ddo
