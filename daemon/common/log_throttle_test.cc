#include "daemon/common/log_throttle.h"

#include "gtest/gtest.h"

namespace ddo {
namespace {

TEST(LogThrottleTest, ABurstPerIntervalThenOneCountOfTheRest) {
  LogThrottle throttle(absl::Seconds(10), 2);
  const absl::Time start = absl::FromUnixSeconds(1000);
  uint64_t suppressed = 99;
  EXPECT_TRUE(throttle.Admit(start, suppressed));
  EXPECT_EQ(suppressed, 0u);
  EXPECT_TRUE(throttle.Admit(start + absl::Seconds(1), suppressed));
  EXPECT_EQ(throttle.NextReport(), absl::InfiniteFuture());
  int written = 0;
  for (int i = 0; i < 1000000; ++i) written += throttle.Admit(start + absl::Seconds(2), suppressed);
  EXPECT_EQ(written, 0);
  EXPECT_EQ(throttle.NextReport(), start + absl::Seconds(10));
  EXPECT_EQ(throttle.TakeSuppressed(start + absl::Seconds(9)), 0u) << "not before its time";
  // The next line after the interval carries the count.
  EXPECT_TRUE(throttle.Admit(start + absl::Seconds(10), suppressed));
  EXPECT_EQ(suppressed, 1000000u);
  EXPECT_EQ(SuppressedNote(suppressed), "; suppressed 1000000 similar lines");
  EXPECT_EQ(SuppressedNote(1), "; suppressed 1 similar line");
  EXPECT_EQ(SuppressedNote(0), "");
}

TEST(LogThrottleTest, AQuietLoopStillSaysHowManyWereSuppressed) {
  LogThrottle throttle(absl::Seconds(10), 1);
  const absl::Time start = absl::FromUnixSeconds(1000);
  uint64_t suppressed = 0;
  EXPECT_TRUE(throttle.Admit(start, suppressed));
  EXPECT_FALSE(throttle.Admit(start, suppressed));
  EXPECT_FALSE(throttle.Admit(start, suppressed));
  EXPECT_EQ(throttle.TakeSuppressed(start + absl::Seconds(10)), 2u);
  EXPECT_EQ(throttle.TakeSuppressed(start + absl::Seconds(30)), 0u) << "said once";
  EXPECT_EQ(throttle.NextReport(), absl::InfiniteFuture());
  // The report counted as this window's line.
  EXPECT_FALSE(throttle.Admit(start + absl::Seconds(11), suppressed));
}

}  // namespace
}  // namespace ddo
