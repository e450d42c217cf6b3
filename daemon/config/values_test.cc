#include "daemon/config/values.h"

#include <cmath>
#include <string>

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

TEST(ValuesTest, NonNegativeNumbersAreBoundedAndNeverEchoedRaw) {
  EXPECT_DOUBLE_EQ(*ParseNonNegativeNumber("--x", "1048576"), kMaxGiB);
  for (const char* bad : {"1e308", "1048577", "-inf", "NaN"}) {
    auto parsed = ParseNonNegativeNumber("--vram-budget-gb", bad);
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_THAT(std::string(parsed.status().message()), HasSubstr("from 0 to 1048576"));
  }
  auto parsed = ParseNonNegativeNumber("--x", std::string(10000, '9') + "\x1b");
  ASSERT_FALSE(parsed.ok());
  EXPECT_LT(parsed.status().message().size(), 200u);
}

TEST(ValuesTest, NumbersInRangeNameTheVariableAndTheRange) {
  EXPECT_DOUBLE_EQ(*ParseNumberInRange("DDO_X", " 0.5 ", 0, 1), 0.5);
  EXPECT_DOUBLE_EQ(*ParseNumberInRange("DDO_X", "1", 0, 1), 1.0);
  for (const char* bad : {"1e308", "nan", "inf", "-inf", "-1", "1.5", "", "x"}) {
    auto parsed = ParseNumberInRange("DDO_X", bad, 0, 1);
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_TRUE(absl::IsInvalidArgument(parsed.status()));
    EXPECT_THAT(std::string(parsed.status().message()), HasSubstr("DDO_X='"));
    EXPECT_THAT(std::string(parsed.status().message()), HasSubstr("from 0 to 1"));
  }
}

TEST(ValuesTest, GiBToBytesClamps) {
  EXPECT_EQ(GiBToBytes(-1), 0u);
  EXPECT_EQ(GiBToBytes(std::nan("")), 0u);
  EXPECT_EQ(GiBToBytes(1e308), uint64_t{1} << 50);
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
