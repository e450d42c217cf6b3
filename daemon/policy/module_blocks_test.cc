// File: daemon/policy/module_blocks_test.cc
#include "daemon/policy/module_blocks.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"

namespace ddo {
namespace {

TEST(ModuleBlocksTest, ABlockIsTheOutermostRepeatedNumberedModule) {
  std::map<std::string, std::string> blocks = BlocksOf(
      {"blocks.0.attn.to_q", "blocks.1.ff.net.2", "blocks.1.ff.net.0", "single.0.proj", "proj_out", ""});
  EXPECT_EQ(blocks["blocks.0.attn.to_q"], "blocks.0");
  EXPECT_EQ(blocks["blocks.1.ff.net.2"], "blocks.1");  // not ff.net.2: the outermost wins
  EXPECT_EQ(blocks["single.0.proj"], "");  // one index is no repetition
  EXPECT_EQ(blocks["proj_out"], "");
  EXPECT_EQ(blocks[""], "");
}

TEST(ModuleBlocksTest, AutoInfersTheRepeatedGroupWithTheMostBytes) {
  std::string described;
  absl::StatusOr<std::map<std::string, std::string>> candidates = ResidentCandidatesOf(
      {"small.0.x", "small.1.x", "large.0", "large.1"}, {1, 1, 10, 10}, {"auto"}, &described);
  ASSERT_TRUE(candidates.ok()) << candidates.status();
  EXPECT_EQ(described, "^large\\.\\d+$");
  EXPECT_EQ(candidates->at("large.1"), "large.1");
  EXPECT_EQ(candidates->at("small.0.x"), "");
}

TEST(ModuleBlocksTest, ResidentCandidatesSkipOverlongPaths) {
  std::string described;
  const std::string long_path = std::string(2000, 'b') + ".1";
  absl::StatusOr<std::map<std::string, std::string>> candidates = ResidentCandidatesOf(
      {"blocks.0", "blocks.1", long_path}, {1, 1, 1}, {"^blocks\\.\\d+$", "b+"}, &described);
  ASSERT_TRUE(candidates.ok()) << candidates.status();
  EXPECT_EQ(candidates->at("blocks.0"), "blocks");  // "b+" matches the first prefix
  EXPECT_EQ(candidates->at(long_path), "");
  EXPECT_FALSE(ResidentCandidatesOf({"x"}, {1}, {"(("}, &described).ok());
}

}  // namespace
}  // namespace ddo
