#include "daemon/server/instance_lock.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

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

std::string Contents(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

void Write(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
}

TEST(InstanceLockTest, ALinkPlantedAsTheLockFileIsNeverFollowed) {
  TempDirForTest dir;
  const std::string precious = dir.Join("precious");
  Write(precious, "someone's work\n");
  const std::string socket = dir.Join("ddod.sock");
  ASSERT_EQ(::symlink(precious.c_str(), (socket + ".lock").c_str()), 0);
  auto lock = InstanceLock::Acquire(socket);
  ASSERT_FALSE(lock.ok());
  EXPECT_TRUE(absl::IsPermissionDenied(lock.status())) << lock.status();
  EXPECT_THAT(std::string(lock.status().message()), HasSubstr(socket + ".lock"));
  EXPECT_THAT(std::string(lock.status().message()), HasSubstr("symbolic link"));
  EXPECT_EQ(Contents(precious), "someone's work\n");
}

TEST(InstanceLockTest, AHardLinkOrAFifoAsTheLockFileIsRefusedUntouched) {
  TempDirForTest dir;
  const std::string precious = dir.Join("precious");
  Write(precious, "someone's work\n");
  const std::string socket = dir.Join("ddod.sock");
  ASSERT_EQ(::link(precious.c_str(), (socket + ".lock").c_str()), 0);
  auto lock = InstanceLock::Acquire(socket);
  ASSERT_FALSE(lock.ok());
  EXPECT_THAT(std::string(lock.status().message()), HasSubstr("2 link(s)"));
  EXPECT_EQ(Contents(precious), "someone's work\n");

  const std::string other = dir.Join("other.sock");
  ASSERT_EQ(::mkfifo((other + ".lock").c_str(), 0600), 0);
  lock = InstanceLock::Acquire(other);  // without blocking
  ASSERT_FALSE(lock.ok());
  EXPECT_THAT(std::string(lock.status().message()), HasSubstr("not a regular file"));
}

TEST(InstanceLockTest, TheSocketsDirectoryIsCheckedFirst) {
  TempDirForTest dir;
  const std::string target = dir.Join("elsewhere");
  ASSERT_EQ(::mkdir(target.c_str(), 0700), 0);
  const std::string link = dir.Join("run");
  ASSERT_EQ(::symlink(target.c_str(), link.c_str()), 0);
  auto lock = InstanceLock::Acquire(link + "/ddod.sock");
  ASSERT_FALSE(lock.ok());
  EXPECT_THAT(std::string(lock.status().message()), HasSubstr(link));
  EXPECT_FALSE(std::filesystem::exists(target + "/ddod.sock.lock"));
}

}  // namespace
}  // namespace ddo
