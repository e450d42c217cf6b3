#include "daemon/common/background_queue.h"

#include <atomic>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ddo {
namespace {

using ::testing::ElementsAre;

BackgroundQueue::KeyMatch Is(const std::string& wanted) {
  return [wanted](const std::string& key) { return key == wanted; };
}

// A job that waits on `release` (or its cancellation), then records `name`.
class Recorder {
 public:
  BackgroundQueue::Work Job(const std::string& name, absl::Notification* release = nullptr) {
    return [this, name, release](const std::function<bool()>& cancelled) {
      if (release != nullptr) {
        while (!release->WaitForNotificationWithTimeout(absl::Milliseconds(1))) {
          if (cancelled()) {
            Record(name + " cancelled");
            return;
          }
        }
      }
      Record(name);
    };
  }
  std::vector<std::string> done() {
    absl::MutexLock lock(&mu_);
    return done_;
  }

 private:
  void Record(const std::string& entry) {
    absl::MutexLock lock(&mu_);
    done_.push_back(entry);
  }
  absl::Mutex mu_;
  std::vector<std::string> done_;
};

TEST(BackgroundQueueTest, JobsRunInOrderOnce) {
  Recorder recorder;
  BackgroundQueue queue;
  absl::Notification release;
  EXPECT_TRUE(queue.Enqueue("a", recorder.Job("a", &release)));
  EXPECT_TRUE(queue.Enqueue("b", recorder.Job("b")));
  EXPECT_FALSE(queue.Enqueue("a", recorder.Job("a again"))) << "running, not cancelled";
  EXPECT_FALSE(queue.Enqueue("b", recorder.Job("b again"))) << "queued already";
  release.Notify();
  queue.WaitIdle();
  EXPECT_THAT(recorder.done(), ElementsAre("a", "b"));
  EXPECT_TRUE(queue.Enqueue("a", recorder.Job("a later"))) << "ran: may be queued again";
  queue.WaitIdle();
  EXPECT_THAT(recorder.done(), ElementsAre("a", "b", "a later"));
}

TEST(BackgroundQueueTest, CancelDropsQueuedJobsAndStopsTheRunningOne) {
  Recorder recorder;
  BackgroundQueue queue;
  absl::Notification never;
  absl::Notification started;
  BackgroundQueue::Work first = recorder.Job("first", &never);
  ASSERT_TRUE(queue.Enqueue("lease-1", [&](const std::function<bool()>& cancelled) {
    started.Notify();
    first(cancelled);
  }));
  ASSERT_TRUE(queue.Enqueue("lease-2", recorder.Job("second")));
  ASSERT_TRUE(queue.Enqueue("lease-3", recorder.Job("third")));
  started.WaitForNotification();
  queue.Cancel(Is("lease-3"));
  queue.CancelAndWait(Is("lease-1"));
  EXPECT_TRUE(queue.Enqueue("lease-1", recorder.Job("first again")))
      << "a cancelled job does not hold its key";
  queue.WaitIdle();
  EXPECT_THAT(recorder.done(), ElementsAre("first cancelled", "second", "first again"));
}

TEST(BackgroundQueueTest, StopCancelsTheRunningJobAndRefusesMore) {
  Recorder recorder;
  absl::Notification started;
  std::atomic<bool> saw_cancel{false};
  {
    BackgroundQueue queue;
    ASSERT_TRUE(queue.Enqueue("a", [&](const std::function<bool()>& cancelled) {
      started.Notify();
      while (!cancelled()) absl::SleepFor(absl::Milliseconds(1));
      saw_cancel.store(true);
    }));
    ASSERT_TRUE(queue.Enqueue("b", recorder.Job("b")));
    started.WaitForNotification();
    queue.Stop();
    EXPECT_TRUE(saw_cancel.load()) << "Stop waits for the running job";
    EXPECT_FALSE(queue.Enqueue("c", recorder.Job("c")));
  }
  EXPECT_TRUE(recorder.done().empty()) << "the queued job was dropped";
}

}  // namespace
}  // namespace ddo
