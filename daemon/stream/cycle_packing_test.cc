// File: daemon/stream/cycle_packing_test.cc
#include "daemon/stream/cycle_packing.h"

#include <random>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ddo {
namespace {

using ::testing::ElementsAre;

// What every packing must satisfy, whatever arena it chose.
void ExpectValid(const CyclePacking& packing, const std::vector<uint64_t>& spans,
                 uint64_t allocated, uint64_t alignment) {
  ASSERT_EQ(packing.starts.size(), spans.size());
  EXPECT_LE(packing.arena_bytes, allocated);
  // Use u + L lies where use u lies, or cycles tile the arena.
  EXPECT_TRUE(packing.cycle_bytes % packing.arena_bytes == 0 ||
              packing.arena_bytes % packing.cycle_bytes == 0);
  EXPECT_LE(packing.end, packing.cycle_bytes);
  uint64_t previous_end = 0;
  for (size_t i = 0; i < spans.size(); ++i) {
    const uint64_t start = packing.starts[i];
    EXPECT_EQ(start % alignment, 0u) << i;
    EXPECT_GE(start, previous_end) << i;  // in order, never overlapping
    EXPECT_LE(start % packing.arena_bytes + spans[i], packing.arena_bytes) << "use " << i << " wraps";
    previous_end = start + spans[i];
  }
  EXPECT_EQ(packing.end, previous_end);
}

TEST(CyclePackingTest, UnitsPackBackToBack) {
  const std::vector<uint64_t> spans = {100, 100, 100};
  const CyclePacking packing = PackCycle(spans, 300, 1);
  EXPECT_THAT(packing.starts, ElementsAre(0, 100, 200));
  EXPECT_EQ(packing.arena_bytes, 300u);
  EXPECT_EQ(packing.cycle_bytes, 300u);
  EXPECT_EQ(packing.padding(), 0u);
}

TEST(CyclePackingTest, SmallCyclesTileTheArena) {
  const CyclePacking packing = PackCycle({64, 32}, 1024, 1);
  EXPECT_THAT(packing.starts, ElementsAre(0, 64));
  EXPECT_EQ(packing.cycle_bytes, 96u);   // use L follows use L - 1
  EXPECT_EQ(packing.arena_bytes, 960u);  // ten cycles per lap
}

// Room lost to the packing: arena given up, plus the padding spread over the laps.
uint64_t Loss(const CyclePacking& packing, uint64_t allocated) {
  return allocated - packing.arena_bytes +
         packing.padding() / std::max<uint64_t>(packing.cycle_bytes / packing.arena_bytes, 1);
}

TEST(CyclePackingTest, ALargeCycleEndsWithPaddingToTheNextLap) {
  // The second unit does not fit after the first: it wraps to the next lap.
  const std::vector<uint64_t> spans = {200, 200, 50};
  const CyclePacking packing = PackCycle(spans, 300, 1);
  ExpectValid(packing, spans, 300, 1);
  EXPECT_THAT(packing.starts, ElementsAre(0, 300, 500));
  EXPECT_EQ(packing.cycle_bytes, 600u);
  EXPECT_EQ(packing.padding(), 50u);
}

TEST(CyclePackingTest, RandomCyclesAreValidAndLoseLittle) {
  std::mt19937_64 random(7);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<uint64_t> spans(1 + random() % 300);
    uint64_t largest = 0;
    for (uint64_t& span : spans) {
      span = 256 * (1 + random() % 400);
      largest = std::max(largest, span);
    }
    const uint64_t allocated = largest * (2 + random() % 10);
    const CyclePacking packing = PackCycle(spans, allocated, 256);
    ExpectValid(packing, spans, allocated, 256);
    EXPECT_GE(packing.arena_bytes, largest);
    EXPECT_LE(Loss(packing, allocated) * 2, allocated) << "trial " << trial;
  }
}

TEST(CyclePackingTest, AFluxSizedScheduleLosesLittleArena) {
  // 218 Linear units of a FLUX transformer's streamed blocks (sizes in MiB, bf16), through
  // an arena of 8 x the largest (108 MiB).
  std::vector<uint64_t> spans;
  const uint64_t mib = 1 << 20;
  for (int block = 0; block < 10; ++block) {
    for (uint64_t size : {108, 18, 18, 18, 18, 18, 18, 18, 18, 72, 72, 72, 72, 108}) {
      spans.push_back(size * mib);
    }
  }
  for (int block = 0; block < 13; ++block) {
    for (uint64_t size : {54, 18, 18, 18, 72, 90}) spans.push_back(size * mib);
  }
  const CyclePacking packing = PackCycle(spans, 8 * 108 * mib);
  ExpectValid(packing, spans, 8 * 108 * mib, 256);
  EXPECT_LE(Loss(packing, 8 * 108 * mib), 16 * mib);
}

}  // namespace
}  // namespace ddo
