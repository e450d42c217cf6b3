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
  // Sticky shared directories (like /tmp) are fine: nobody can replace our files there.
  ASSERT_EQ(::chmod(open_dir.c_str(), 01777), 0);
  EXPECT_TRUE(EnsurePrivateDirectory(open_dir).ok());
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
}

}  // namespace
}  // namespace ddo
