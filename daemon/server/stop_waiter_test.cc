#include "daemon/server/stop_waiter.h"

#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ddo {
namespace {

using ::testing::HasSubstr;

TEST(StopWaiterTest, RequestStopWakesTheWaiter) {
  auto waiter = StopWaiter::Create(std::nullopt);
  ASSERT_TRUE(waiter.ok()) << waiter.status();
  std::thread requester([&] { waiter->RequestStop(); });
  const StopReason reason = waiter->Wait();
  requester.join();
  EXPECT_EQ(reason.kind, StopReason::Kind::kRequested);
}

TEST(StopWaiterTest, SigtermIsTakenSynchronously) {
  ASSERT_TRUE(BlockTerminationSignals().ok());
  auto waiter = StopWaiter::Create(std::nullopt);
  ASSERT_TRUE(waiter.ok());
  // Aimed at this thread, so that no other test thread (gRPC's) can receive it.
  ASSERT_EQ(::pthread_kill(::pthread_self(), SIGTERM), 0);
  const StopReason reason = waiter->Wait();
  EXPECT_EQ(reason.kind, StopReason::Kind::kSignal);
  EXPECT_EQ(reason.description, "SIGTERM");
}

TEST(StopWaiterTest, SighupAsksForAReload) {
  ASSERT_TRUE(BlockTerminationSignals().ok());
  auto waiter = StopWaiter::Create(std::nullopt);
  ASSERT_TRUE(waiter.ok()) << waiter.status();
  ASSERT_EQ(::pthread_kill(::pthread_self(), SIGHUP), 0);
  const StopReason reason = waiter->Wait();
  EXPECT_EQ(reason.kind, StopReason::Kind::kReload);
  EXPECT_EQ(reason.description, "SIGHUP");
}

TEST(StopWaiterTest, ParentDeathIsNoticedWithinASecond) {
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::usleep(200 * 1000);
    ::_exit(0);
  }
  auto waiter = StopWaiter::Create(child);
  ASSERT_TRUE(waiter.ok()) << waiter.status();
  // Reap the child when it exits (a zombie still counts as alive for kill(pid, 0)).
  std::thread reaper([child] { ::waitpid(child, nullptr, 0); });
  const auto start = std::chrono::steady_clock::now();
  const StopReason reason = waiter->Wait();
  const auto waited = std::chrono::steady_clock::now() - start;
  reaper.join();
  EXPECT_EQ(reason.kind, StopReason::Kind::kParentExited);
  EXPECT_THAT(reason.description, HasSubstr(std::to_string(child)));
  EXPECT_LT(waited, std::chrono::seconds(1));
}

TEST(StopWaiterTest, AParentThatIsAlreadyGoneIsAnError) {
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::_exit(0);
  }
  ASSERT_EQ(::waitpid(child, nullptr, 0), child);
  auto waiter = StopWaiter::Create(child);
  ASSERT_FALSE(waiter.ok());
  EXPECT_TRUE(absl::IsNotFound(waiter.status()));
  EXPECT_THAT(std::string(waiter.status().message()), HasSubstr("--parent-pid"));
}

}  // namespace
}  // namespace ddo
