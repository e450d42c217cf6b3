#include "daemon/config/values.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ddo {
namespace {

using ::testing::HasSubstr;

TEST(ValuesTest, SeedBooleanRule) {
  for (const char* yes : {"1", "true", "TRUE", " yes ", "On"}) {
    EXPECT_TRUE(ParseSeedBool(yes)) << yes;
  }
  for (const char* no : {"0", "false", "", "2", "enabled", "y"}) {
    EXPECT_FALSE(ParseSeedBool(no)) << no;
  }
}

TEST(ValuesTest, NonNegativeNumbers) {
  EXPECT_DOUBLE_EQ(*ParseNonNegativeNumber("--x", "2.5"), 2.5);
  EXPECT_DOUBLE_EQ(*ParseNonNegativeNumber("--x", " 0 "), 0.0);
  for (const char* bad : {"-1", "abc", "", "nan", "inf", "1e400"}) {
    auto parsed = ParseNonNegativeNumber("--ram-budget-gb", bad);
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_TRUE(absl::IsInvalidArgument(parsed.status()));
    EXPECT_THAT(std::string(parsed.status().message()), HasSubstr("--ram-budget-gb"));
  }
}

TEST(ValuesTest, Pids) {
  EXPECT_EQ(*ParsePid("--parent-pid", "1234"), 1234);
  EXPECT_FALSE(ParsePid("--parent-pid", "1").ok());
  EXPECT_FALSE(ParsePid("--parent-pid", "0").ok());
  EXPECT_FALSE(ParsePid("--parent-pid", "x").ok());
}

TEST(ValuesTest, GiBAreBinary) {
  EXPECT_EQ(GiBToBytes(1), 1073741824u);
  EXPECT_EQ(GiBToBytes(0.5), 536870912u);
}

}  // namespace
}  // namespace ddo
