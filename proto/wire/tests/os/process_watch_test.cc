#include "ddo/os/process_watch.h"

#include "absl/time/clock.h"
#include "child_process.h"
#include "gtest/gtest.h"

namespace ddo::os {
namespace {

using test::ChildProcess;

TEST(ProcessWatchTest, SeesAChildEnd) {
  absl::StatusOr<ChildProcess> child = ChildProcess::Start({"sleep-ms", "400"});
  ASSERT_TRUE(child.ok()) << child.status();
  absl::StatusOr<ProcessWatch> watch = ProcessWatch::Open(child->pid());
  ASSERT_TRUE(watch.ok()) << watch.status();
  EXPECT_EQ(watch->pid(), child->pid());
  EXPECT_FALSE(watch->Exited());
  const absl::Time started = absl::Now();
  EXPECT_TRUE(watch->WaitForExit(absl::Seconds(30)));
  EXPECT_LT(absl::Now() - started, absl::Seconds(20));
  EXPECT_TRUE(watch->Exited());
  EXPECT_EQ(child->Wait(), 0);
}

TEST(ProcessWatchTest, AWaitEndsAtItsTimeoutWhileTheProcessRuns) {
  absl::StatusOr<ChildProcess> child = ChildProcess::Start({"sleep-ms", "1000"});
  ASSERT_TRUE(child.ok()) << child.status();
  absl::StatusOr<ProcessWatch> watch = ProcessWatch::Open(child->pid());
  ASSERT_TRUE(watch.ok()) << watch.status();
  const absl::Time started = absl::Now();
  EXPECT_FALSE(watch->WaitForExit(absl::Milliseconds(150)));
  EXPECT_GE(absl::Now() - started, absl::Milliseconds(100));
}

TEST(ProcessWatchTest, AProcessThatIsGoneIsNotFound) {
  absl::StatusOr<ChildProcess> child = ChildProcess::Start({"exit", "3"});
  ASSERT_TRUE(child.ok()) << child.status();
  const ProcessId pid = child->pid();
  EXPECT_EQ(child->Wait(), 3);
  absl::StatusOr<ProcessWatch> watch = ProcessWatch::Open(pid);
  EXPECT_TRUE(absl::IsNotFound(watch.status())) << watch.status();
}

TEST(ProcessWatchTest, ThisProcessRunsAndBadPidsAreRefused) {
  absl::StatusOr<ProcessWatch> self = ProcessWatch::Open(CurrentProcessId());
  ASSERT_TRUE(self.ok()) << self.status();
  EXPECT_FALSE(self->Exited());
  EXPECT_TRUE(self->pollable().valid() || !self->Exited());
  EXPECT_TRUE(absl::IsInvalidArgument(ProcessWatch::Open(0).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(ProcessWatch::Open(-5).status()));
}

}  // namespace
}  // namespace ddo::os
