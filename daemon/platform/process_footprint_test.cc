#include "daemon/platform/process_footprint.h"

#include <unistd.h>

#include <cstring>
#include <memory>

#include "daemon/common/wine_for_test.h"
#include "gtest/gtest.h"

namespace ddo {
namespace {

// wine answers GetProcessMemoryInfo with zeros: the private commit can only be checked on
// Windows itself (docs/windows.md, "Not verified").
bool PrivateBytesAreReported() { return !RunningUnderWine(); }

TEST(ProcessFootprintTest, ParsesRssAnon) {
  auto bytes = ParseStatusRssAnon(
      "Name:\tpython3\nVmRSS:\t  900 kB\nRssAnon:\t  1536 kB\nRssFile:\t 12 kB\nRssShmem:\t 99 kB\n");
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_EQ(*bytes, 1536u * 1024);
  EXPECT_EQ(ParseStatusRssAnon("Name:\tx\nVmRSS:\t 1 kB\n").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_FALSE(ParseStatusRssAnon("RssAnon:\t lots kB\n").ok());
  EXPECT_FALSE(ParseStatusRssAnon("RssAnon:\t 12 pages\n").ok());
}

TEST(ProcessFootprintTest, ParsesTheStartTimePastACommandNameWithSpacesAndParentheses) {
  // Field 22 is the 20th after the command name: 4242.
  const char* stat =
      "77 (a (b) c) S 1 77 77 0 -1 4194560 100 0 0 0 5 3 0 0 20 0 1 0 4242 1000 200 ...";
  auto started = ParseStatStartTime(stat);
  ASSERT_TRUE(started.ok()) << started.status();
  EXPECT_EQ(*started, 4242u);
  EXPECT_FALSE(ParseStatStartTime("77 (cut short) S 1 2").ok());
  EXPECT_FALSE(ParseStatStartTime("no parentheses at all").ok());
}

TEST(ProcessFootprintTest, OwnPrivateMemoryGrowsWithWhatItTouches) {
  auto before = ReadOwnFootprint();
  ASSERT_TRUE(before.ok()) << before.status();
  constexpr size_t kBytes = 64 << 20;
  std::unique_ptr<char[]> block(new char[kBytes]);
  std::memset(block.get(), 1, kBytes);
  auto after = ReadOwnFootprint();
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->started, before->started);
  EXPECT_NE(block[kBytes - 1], 0);
  if (!PrivateBytesAreReported()) GTEST_SKIP() << "wine reports no private memory";
  EXPECT_GE(after->private_bytes, before->private_bytes + kBytes / 2);
}

TEST(ProcessFootprintTest, ReadsAProcessByItsPid) {
  auto own = ReadOwnFootprint();
  auto by_pid = ReadProcessFootprint(::getpid());
  ASSERT_TRUE(by_pid.ok()) << by_pid.status();
  EXPECT_EQ(by_pid->started, own->started);
  EXPECT_EQ(ReadProcessFootprint(0).status().code(), absl::StatusCode::kInvalidArgument);
  if (!PrivateBytesAreReported()) GTEST_SKIP() << "wine reports no private memory";
  EXPECT_GT(by_pid->private_bytes, 0u);
}

}  // namespace
}  // namespace ddo
