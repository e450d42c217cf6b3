// One ddod per socket on Windows: the instance lock, between this test and child processes.
#ifdef _WIN32

#include "ddo/os/windows_instance_lock.h"

#include <windows.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "child_process.h"
#include "ddo/os/process_watch.h"
#include "gtest/gtest.h"

namespace ddo::os {
namespace {

using test::ChildProcess;

std::string SocketPath(const std::string& what) {
  char directory[MAX_PATH];
  ::GetTempPathA(MAX_PATH, directory);
  return absl::StrCat(directory, "ddo-os-test-", CurrentProcessId(), "-", what, ".sock");
}

TEST(WindowsInstanceLockTest, ALiveHolderIsNeverStolenAndNamedInTheRefusal) {
  const std::string socket = SocketPath("held");
  {
    absl::StatusOr<WindowsInstanceLock> held = WindowsInstanceLock::Acquire(socket);
    ASSERT_TRUE(held.ok()) << held.status();
    // Another process is refused, and told who holds it (exit code 20).
    absl::StatusOr<ChildProcess> other = ChildProcess::Start({"lock", socket, "0"});
    ASSERT_TRUE(other.ok()) << other.status();
    EXPECT_EQ(other->Wait(), 20);
    absl::StatusOr<WindowsInstanceLock> again = WindowsInstanceLock::Acquire(socket);
    EXPECT_TRUE(absl::IsAlreadyExists(again.status())) << again.status();
    EXPECT_NE(again.status().message().find(absl::StrCat("process ", CurrentProcessId())),
              std::string::npos)
        << again.status();
  }
  // Released: the next one takes it.
  absl::StatusOr<ChildProcess> next = ChildProcess::Start({"lock", socket, "0"});
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(next->Wait(), 0);
}

TEST(WindowsInstanceLockTest, AKilledHoldersLockIsTakenOver) {
  const std::string socket = SocketPath("killed");
  // The child takes the lock and holds it for a minute; it is killed long before.
  absl::StatusOr<ChildProcess> holder = ChildProcess::Start({"lock", socket, "60000"});
  ASSERT_TRUE(holder.ok()) << holder.status();
  absl::StatusOr<ProcessWatch> watch = ProcessWatch::Open(holder->pid());
  ASSERT_TRUE(watch.ok()) << watch.status();
  // Wait until the child holds it (our Acquire refused; one that succeeds first lets go at
  // once), then kill the child.
  for (int tries = 0; tries < 200; ++tries) {
    if (!WindowsInstanceLock::Acquire(socket).ok()) break;
    ::Sleep(25);
  }
  NativeHandle process(::OpenProcess(PROCESS_TERMINATE, FALSE, static_cast<DWORD>(holder->pid())));
  ASSERT_TRUE(process.valid());
  ASSERT_TRUE(::TerminateProcess(process.get(), 9));
  ASSERT_TRUE(watch->WaitForExit(absl::Seconds(30)));
  EXPECT_EQ(holder->Wait(), 9);
  absl::StatusOr<WindowsInstanceLock> taken = WindowsInstanceLock::Acquire(socket);
  EXPECT_TRUE(taken.ok()) << taken.status();
}

}  // namespace
}  // namespace ddo::os

#endif  // _WIN32
