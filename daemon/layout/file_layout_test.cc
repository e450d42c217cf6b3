#include "daemon/layout/file_layout.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ddo {
namespace {

using ::testing::ElementsAre;

TEST(CoalesceRangesTest, EmptyInputGivesNothing) {
  EXPECT_TRUE(CoalesceRanges({}, 100).empty());
  EXPECT_TRUE(CoalesceRanges({{0, 10, 0}, {1, 0, 0}}, 100).empty());
}

TEST(CoalesceRangesTest, MergesAcrossGapsUpToMaxGap) {
  // 0..100, gap 50, 150..200, gap 51, 251..300.
  const std::vector<FileRange> merged =
      CoalesceRanges({{0, 0, 100}, {0, 150, 50}, {0, 251, 49}}, 50);
  EXPECT_THAT(merged, ElementsAre(FileRange{0, 0, 200}, FileRange{0, 251, 49}));
}

TEST(CoalesceRangesTest, ZeroGapMergesOnlyTouchingAndOverlapping) {
  const std::vector<FileRange> merged =
      CoalesceRanges({{0, 0, 10}, {0, 10, 10}, {0, 15, 30}, {0, 46, 4}}, 0);
  EXPECT_THAT(merged, ElementsAre(FileRange{0, 0, 45}, FileRange{0, 46, 4}));
}

TEST(CoalesceRangesTest, ContainedRangeDoesNotShrinkTheCover) {
  EXPECT_THAT(CoalesceRanges({{0, 0, 100}, {0, 10, 5}}, 0), ElementsAre(FileRange{0, 0, 100}));
}

TEST(CoalesceRangesTest, NeverMergesAcrossFilesAndSortsInput) {
  const std::vector<FileRange> merged =
      CoalesceRanges({{1, 0, 10}, {0, 20, 10}, {0, 0, 10}, {1, 10, 10}}, 1 << 20);
  EXPECT_THAT(merged, ElementsAre(FileRange{0, 0, 30}, FileRange{1, 0, 20}));
  EXPECT_EQ(TotalRangeBytes(merged), 50u);
}

TEST(CoalesceRangesTest, CoversEveryInputByte) {
  std::vector<FileRange> ranges;
  for (uint64_t i = 0; i < 64; ++i) ranges.push_back({static_cast<uint32_t>(i % 3), i * 37, 11});
  const std::vector<FileRange> merged = CoalesceRanges(ranges, 20);
  for (const FileRange& input : ranges) {
    bool covered = false;
    for (const FileRange& out : merged) {
      covered |= out.file == input.file && out.offset <= input.offset && input.end() <= out.end();
    }
    EXPECT_TRUE(covered) << input.file << "@" << input.offset;
  }
  for (size_t i = 1; i < merged.size(); ++i) {
    if (merged[i].file == merged[i - 1].file) {
      EXPECT_GT(merged[i].offset, merged[i - 1].end() + 20);
    }
  }
}

}  // namespace
}  // namespace ddo
