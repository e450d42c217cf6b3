#include "daemon/common/runtime_dir.h"

#include <sys/stat.h>

#include "daemon/common/temp_dir_for_test.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ddo {
namespace {

using ::testing::HasSubstr;

mode_t ModeOf(const std::string& path) {
  struct stat info {};
  ::stat(path.c_str(), &info);
  return info.st_mode & 07777;
}

TEST(RuntimeDirTest, CreatesMissingDirectoriesOwnerOnly) {
  TempDirForTest dir;
  const std::string nested = dir.Join("a/b/c");
  ASSERT_TRUE(EnsurePrivateDirectory(nested).ok());
  EXPECT_EQ(ModeOf(dir.Join("a")), 0700u);
  EXPECT_EQ(ModeOf(nested), 0700u);
  EXPECT_TRUE(EnsurePrivateDirectory(nested).ok()) << "idempotent";
}

TEST(RuntimeDirTest, RefusesDirectoriesOthersCanWrite) {
  TempDirForTest dir;
  const std::string open_dir = dir.Join("open");
  ASSERT_EQ(::mkdir(open_dir.c_str(), 0700), 0);
  ASSERT_EQ(::chmod(open_dir.c_str(), 0777), 0);
  auto status = EnsurePrivateDirectory(open_dir);
  EXPECT_TRUE(absl::IsPermissionDenied(status));
  EXPECT_THAT(std::string(status.message()), HasSubstr("writable by other users"));
  // Nor a sticky shared directory (like /tmp): the clients refuse a socket there anyway, and
  // anyone may have put a link there under the name of a file ddod makes.
  ASSERT_EQ(::chmod(open_dir.c_str(), 01777), 0);
  status = EnsurePrivateDirectory(open_dir);
  EXPECT_TRUE(absl::IsPermissionDenied(status));
  EXPECT_THAT(std::string(status.message()), HasSubstr(open_dir));
}

TEST(RuntimeDirTest, ALinkInPlaceOfTheDirectoryIsNeverFollowed) {
  TempDirForTest dir;
  const std::string target = dir.Join("elsewhere");
  ASSERT_EQ(::mkdir(target.c_str(), 0700), 0);
  const std::string link = dir.Join("link");
  ASSERT_EQ(::symlink(target.c_str(), link.c_str()), 0);
  absl::StatusOr<PrivateDirectory> opened = PrivateDirectory::Open(link);
  ASSERT_FALSE(opened.ok());
  EXPECT_TRUE(absl::IsPermissionDenied(opened.status()));
  EXPECT_THAT(std::string(opened.status().message()), HasSubstr(link));
  EXPECT_THAT(std::string(opened.status().message()), HasSubstr("symbolic link"));
}

TEST(RuntimeDirTest, TheDirectoryIsHeldOpenAndSaysWhetherItWasMade) {
  TempDirForTest dir;
  absl::StatusOr<PrivateDirectory> made = PrivateDirectory::Open(dir.Join("run"));
  ASSERT_TRUE(made.ok()) << made.status();
  EXPECT_TRUE(made->created());
  EXPECT_GE(made->fd(), 0);
  struct stat by_fd {}, by_path {};
  ASSERT_EQ(::fstat(made->fd(), &by_fd), 0);
  ASSERT_EQ(::stat(dir.Join("run").c_str(), &by_path), 0);
  EXPECT_EQ(by_fd.st_ino, by_path.st_ino);
  absl::StatusOr<PrivateDirectory> again = PrivateDirectory::Open(dir.Join("run"));
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(again->created());
}

TEST(RuntimeDirTest, StaleSocketsAreRemovedButNotThroughALink) {
  TempDirForTest dir;
  EXPECT_TRUE(RemoveStaleSocket(dir.Join("none.sock")).ok());
  const std::string file = dir.Join("file");
  FILE* handle = std::fopen(file.c_str(), "w");
  ASSERT_NE(handle, nullptr);
  std::fclose(handle);
  const std::string link = dir.Join("ddod.sock");
  ASSERT_EQ(::symlink(file.c_str(), link.c_str()), 0);
  EXPECT_TRUE(absl::IsFailedPrecondition(RemoveStaleSocket(link)));
  EXPECT_TRUE(absl::IsFailedPrecondition(RemoveStaleSocket(file)));
  struct stat info {};
  EXPECT_EQ(::lstat(link.c_str(), &info), 0);
  EXPECT_EQ(::lstat(file.c_str(), &info), 0);
}

TEST(RuntimeDirTest, RefusesADirectoryAnotherUserOwnsEvenWhenSticky) {
  if (::geteuid() != 0) {
    GTEST_SKIP() << "needs root to give a directory to another user";
  }
  TempDirForTest dir;
  // Another user pre-creating our runtime directory (e.g. /tmp/ddo-<uid>) as 1777.
  const std::string planted = dir.Join("planted");
  ASSERT_EQ(::mkdir(planted.c_str(), 0700), 0);
  ASSERT_EQ(::chmod(planted.c_str(), 01777), 0);
  ASSERT_EQ(::chown(planted.c_str(), 12345, 12345), 0);
  auto status = EnsurePrivateDirectory(planted);
  EXPECT_TRUE(absl::IsPermissionDenied(status));
  EXPECT_THAT(std::string(status.message()), HasSubstr("uid 12345"));
}

TEST(RuntimeDirTest, RefusesAFileInTheWay) {
  TempDirForTest dir;
  const std::string file = dir.Join("file");
  FILE* handle = std::fopen(file.c_str(), "w");
  ASSERT_NE(handle, nullptr);
  std::fclose(handle);
  EXPECT_FALSE(EnsurePrivateDirectory(file).ok());
}

TEST(RuntimeDirTest, ParentDirectory) {
  EXPECT_EQ(ParentDirectory("/run/ddo/ddod.sock"), "/run/ddo");
  EXPECT_EQ(ParentDirectory("/ddod.sock"), "/");
  EXPECT_EQ(ParentDirectory("ddod.sock"), ".");
  EXPECT_EQ(LastComponent("/run/ddo/ddod.sock"), "ddod.sock");
  EXPECT_EQ(LastComponent("ddod.sock"), "ddod.sock");
}

}  // namespace
}  // namespace ddo
