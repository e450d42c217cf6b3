#include "daemon/server/instance_lock.h"

#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>

#include "daemon/common/temp_dir_for_test.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ddo {
namespace {

using ::testing::HasSubstr;

TEST(InstanceLockTest, RecordsOurPidAndRemovesTheFileOnRelease) {
  TempDirForTest dir;
  const std::string socket = dir.Join("ddod.sock");
  {
    auto lock = InstanceLock::Acquire(socket);
    ASSERT_TRUE(lock.ok()) << lock.status();
    EXPECT_EQ(ReadLockOwner(socket + ".lock"), ::getpid());
  }
  EXPECT_FALSE(std::filesystem::exists(socket + ".lock"));
}

TEST(InstanceLockTest, ASecondHolderIsRefusedWithTheOwnersPid) {
  TempDirForTest dir;
  const std::string socket = dir.Join("ddod.sock");
  auto first = InstanceLock::Acquire(socket);
  ASSERT_TRUE(first.ok());
  // flock locks belong to the open file description: a second open in this process conflicts
  // exactly as another process would.
  auto second = InstanceLock::Acquire(socket);
  ASSERT_FALSE(second.ok());
  EXPECT_TRUE(absl::IsAlreadyExists(second.status()));
  EXPECT_THAT(std::string(second.status().message()), HasSubstr(socket));
  EXPECT_THAT(std::string(second.status().message()),
              HasSubstr("(pid " + std::to_string(::getpid()) + ")"));
}

TEST(InstanceLockTest, ALockLeftByADeadProcessIsTakenOver) {
  TempDirForTest dir;
  const std::string socket = dir.Join("ddod.sock");
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto lock = InstanceLock::Acquire(socket);
    // Die holding the lock, without running destructors: the file stays behind.
    ::_exit(lock.ok() ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_EQ(WEXITSTATUS(status), 0);
  ASSERT_TRUE(std::filesystem::exists(socket + ".lock"));
  EXPECT_EQ(ReadLockOwner(socket + ".lock"), child);

  auto lock = InstanceLock::Acquire(socket);
  ASSERT_TRUE(lock.ok()) << lock.status();
  EXPECT_EQ(ReadLockOwner(socket + ".lock"), ::getpid());
}

}  // namespace
}  // namespace ddo
