#include "daemon/common/work_progress.h"

#include <atomic>
#include <string>
#include <vector>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

namespace ddo {
namespace {

struct Report {
  uint64_t done;
  uint64_t total;
};

constexpr ReportPacing kFast{absl::Milliseconds(5), absl::Milliseconds(20)};

TEST(RunReportingProgressTest, ReportsAtOnceAsWorkAdvancesAndReturnsItsResult) {
  WorkProgress progress;
  std::vector<Report> reports;
  absl::Notification reported_first;
  std::string result = RunReportingProgress<std::string>(
      progress,
      [&] {
        reported_first.WaitForNotification();  // the first report comes before any work
        progress.SetTotal(300);
        for (int i = 0; i < 3; ++i) {
          progress.Add(100);
          absl::SleepFor(absl::Milliseconds(30));
        }
        return std::string("made");
      },
      [&](uint64_t done, uint64_t total) {
        reports.push_back({done, total});
        if (!reported_first.HasBeenNotified()) reported_first.Notify();
      },
      [] { return false; }, kFast);
  EXPECT_EQ(result, "made");
  ASSERT_GE(reports.size(), 3u);
  EXPECT_EQ(reports.front().done, 0u);
  for (size_t i = 1; i < reports.size(); ++i) {
    EXPECT_GE(reports[i].done, reports[i - 1].done) << "progress never goes back";
  }
  EXPECT_FALSE(progress.cancelled());
}

TEST(RunReportingProgressTest, SilentWorkStillGetsHeartbeats) {
  WorkProgress progress;
  int reports = 0;
  RunReportingProgress<int>(
      progress,
      [] {
        absl::SleepFor(absl::Milliseconds(200));  // e.g. one long cudaHostRegister
        return 0;
      },
      [&](uint64_t, uint64_t) { ++reports; }, [] { return false; }, kFast);
  // One at once, then one per 20 ms heartbeat over 200 ms (loosely: the machine may be busy).
  EXPECT_GE(reports, 4);
}

TEST(RunReportingProgressTest, ACancelReachesTheWorkAndItsResultIsAwaited) {
  WorkProgress progress;
  std::atomic<bool> hung_up{false};
  int reports = 0;
  bool stopped_early = RunReportingProgress<bool>(
      progress,
      [&] {
        hung_up.store(true);
        for (int i = 0; i < 1000; ++i) {  // 10 s unless cancelled
          if (progress.cancelled()) return true;
          absl::SleepFor(absl::Milliseconds(10));
        }
        return false;
      },
      [&](uint64_t, uint64_t) { ++reports; }, [&] { return hung_up.load(); }, kFast);
  EXPECT_TRUE(stopped_early);
  EXPECT_TRUE(progress.cancelled());
}

}  // namespace
}  // namespace ddo
