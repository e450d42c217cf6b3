// File: daemon/config/module_patterns_test.cc
#include "daemon/config/module_patterns.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ddo {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kSetting[] = "DDO_ALWAYS_RESIDENT_MODULE_PATTERNS";

TEST(ModulePatternsTest, SearchesLikePythonsReSearch) {
  absl::StatusOr<ModulePatterns> patterns = ModulePatterns::Compile(
      kSetting, {"(^|\\.)(proj_in|norm_out)(\\.|$)", "^blocks\\.\\d+$"});
  ASSERT_TRUE(patterns.ok()) << patterns.status();
  EXPECT_EQ(patterns->size(), 2u);
  EXPECT_TRUE(patterns->Search("proj_in"));
  EXPECT_TRUE(patterns->Search("transformer.norm_out.linear"));  // anywhere, not a full match
  EXPECT_TRUE(patterns->Search("blocks.12"));
  EXPECT_FALSE(patterns->Search("blocks.12.attn"));
  EXPECT_FALSE(patterns->Search("my_proj_inner"));
  EXPECT_FALSE(ModulePatterns().Search("anything"));  // no patterns match nothing
}

TEST(ModulePatternsTest, CatastrophicBacktrackingPatternIsLinear) {
  // With std::regex this ran for minutes; RE2 answers at once (ctest's timeout catches a
  // regression to a backtracking engine).
  absl::StatusOr<ModulePatterns> patterns = ModulePatterns::Compile(kSetting, {"(x+x+)+y"});
  ASSERT_TRUE(patterns.ok()) << patterns.status();
  const std::string path(100000, 'x');
  for (int i = 0; i < 10; ++i) EXPECT_FALSE(patterns->Search(path));
  EXPECT_TRUE(patterns->Search(path + "y"));
}

TEST(ModulePatternsTest, HugePathDoesNotCrash) {
  // std::regex recursed once per character and overflowed the stack on long paths.
  absl::StatusOr<ModulePatterns> patterns =
      ModulePatterns::Compile(kSetting, {"(^|\\.)(a|b)*(\\.|$)", "(.*)*z"});
  ASSERT_TRUE(patterns.ok()) << patterns.status();
  std::string path;
  while (path.size() < (1u << 20)) path += "ab.";
  EXPECT_TRUE(patterns->Search(path));
  EXPECT_FALSE(ModulePatterns::Compile(kSetting, {"(.*)*z"})->Search(path));
}

TEST(ModulePatternsTest, OverlongPatternIsRefusedWithTheSettingAndIndex) {
  const std::string pattern(kMaxModulePatternBytes + 1, 'a');
  absl::Status status = CheckModulePattern(kSetting, 3, pattern);
  ASSERT_TRUE(absl::IsInvalidArgument(status));
  EXPECT_THAT(status.message(), HasSubstr("DDO_ALWAYS_RESIDENT_MODULE_PATTERNS[3]="));
  EXPECT_THAT(status.message(), HasSubstr("at most 512"));
  EXPECT_LT(status.message().size(), 300u);  // a prefix of the pattern only
  EXPECT_TRUE(CheckModulePattern(kSetting, 0, std::string(kMaxModulePatternBytes, 'a')).ok());

  absl::StatusOr<ModulePatterns> compiled =
      ModulePatterns::Compile("DDO_RESIDENT_MODULE_PATTERNS", {"ok", pattern});
  ASSERT_FALSE(compiled.ok());
  EXPECT_THAT(compiled.status().message(), HasSubstr("DDO_RESIDENT_MODULE_PATTERNS[1]="));
}

TEST(ModulePatternsTest, TooManyPatternsAreRefused) {
  std::vector<std::string> many(kMaxModulePatternsPerSetting + 1, "a");
  absl::StatusOr<ModulePatterns> compiled = ModulePatterns::Compile(kSetting, many);
  ASSERT_FALSE(compiled.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(compiled.status()));
  EXPECT_THAT(compiled.status().message(),
              HasSubstr("DDO_ALWAYS_RESIDENT_MODULE_PATTERNS: 65 patterns, at most 64"));
  many.pop_back();
  EXPECT_TRUE(ModulePatterns::Compile(kSetting, many).ok());
}

TEST(ModulePatternsTest, InvalidPatternIsRefusedWithAShortEscapedExcerpt) {
  for (const std::string& bad : {std::string("(open"), std::string("a)"), std::string("(?<=x)y"),
                                 std::string("(a)\\1"), std::string("[z-a]")}) {
    absl::Status status = CheckModulePattern(kSetting, 0, bad);
    ASSERT_TRUE(absl::IsInvalidArgument(status)) << bad;
    EXPECT_THAT(status.message(), HasSubstr("DDO_ALWAYS_RESIDENT_MODULE_PATTERNS[0]='"));
    EXPECT_THAT(status.message(), HasSubstr("is not a regular expression"));
  }
  // Control characters and a long tail never reach the message raw.
  const std::string nasty = "(\x1b[2J" + std::string(400, 'q');
  absl::Status status = CheckModulePattern(kSetting, 7, nasty);
  ASSERT_FALSE(status.ok());
  EXPECT_THAT(status.message(), HasSubstr("[7]='(\\x1b[2J"));
  EXPECT_THAT(status.message(), Not(HasSubstr("\x1b")));
  EXPECT_THAT(status.message(), Not(HasSubstr(std::string(100, 'q'))));
}

TEST(ModulePatternsTest, PatternsThatCompileTooLargeAreRefused) {
  // Nested counted repetition expands past the memory bound.
  absl::Status status = CheckModulePattern(kSetting, 0, "((((a{100}){100}){100}){100})");
  ASSERT_TRUE(absl::IsInvalidArgument(status));
  EXPECT_THAT(status.message(), HasSubstr("is not a regular expression"));
}

}  // namespace
}  // namespace ddo
