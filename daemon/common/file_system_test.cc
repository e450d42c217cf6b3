#include "daemon/common/file_system.h"

#include <fcntl.h>

#include <cerrno>
#include <string>

#include "daemon/common/temp_dir_for_test.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ddo {
namespace {

using ::testing::HasSubstr;

TEST(FileSystemTest, ThePosixOneNamesTheCallTheFileAndTheErrno) {
  FileSystem* fs = FileSystem::Default();
  auto missing = fs->Open("/nonexistent-ddo-dir/file", O_RDONLY | O_CLOEXEC, 0);
  ASSERT_FALSE(missing.ok());
  EXPECT_TRUE(absl::IsNotFound(missing.status()));
  EXPECT_THAT(std::string(missing.status().message()),
              HasSubstr("open /nonexistent-ddo-dir/file: No such file or directory"));
  EXPECT_TRUE(absl::IsNotFound(fs->ShmUnlink("/ddo-no-such-segment-for-a-test")));
}

TEST(FileSystemTest, TheNthCallFailsOnceAndEveryCallIsCounted) {
  TempDirForTest dir;
  FaultInjectingFileSystem fs;
  const std::string path = dir.Join("f");
  fs.FailNth(FileOp::kOpen, EMFILE, /*nth=*/2);
  EXPECT_TRUE(fs.Open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600).ok());
  auto second = fs.Open(path, O_RDONLY | O_CLOEXEC, 0);
  ASSERT_FALSE(second.ok());
  EXPECT_TRUE(absl::IsResourceExhausted(second.status()));
  EXPECT_THAT(std::string(second.status().message()),
              HasSubstr("open " + path + ": Too many open files"));
  EXPECT_TRUE(fs.Open(path, O_RDONLY | O_CLOEXEC, 0).ok()) << "once only";
  EXPECT_EQ(fs.Calls(FileOp::kOpen), 3);

  fs.FailAlways(FileOp::kSync, EIO);
  auto fd = fs.Open(path, O_RDONLY | O_CLOEXEC, 0);
  ASSERT_TRUE(fd.ok());
  EXPECT_THAT(std::string(fs.Sync(fd->get(), path).message()),
              HasSubstr("fsync " + path + ": Input/output error"));
  EXPECT_FALSE(fs.Sync(fd->get(), path).ok());
  fs.Heal();
  EXPECT_TRUE(fs.Sync(fd->get(), path).ok());
  EXPECT_EQ(fs.Calls(FileOp::kSync), 3);
}

TEST(FileSystemTest, ReadsCanSeeATruncatedFile) {
  TempDirForTest dir;
  FaultInjectingFileSystem fs;
  const std::string path = dir.Join("f");
  {
    auto fd = fs.Open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    ASSERT_TRUE(fd.ok());
    ASSERT_TRUE(fs.Write(fd->get(), "0123456789", 10, path).ok());
  }
  auto fd = fs.Open(path, O_RDONLY | O_CLOEXEC, 0);
  ASSERT_TRUE(fd.ok());
  fs.TruncateReadsAt(6);
  char buffer[10] = {};
  auto across = fs.Read(fd->get(), 4, buffer, 6, path);
  ASSERT_TRUE(across.ok());
  EXPECT_EQ(*across, 2u);
  EXPECT_EQ(std::string(buffer, 2), "45");
  auto beyond = fs.Read(fd->get(), 6, buffer, 4, path);
  ASSERT_TRUE(beyond.ok());
  EXPECT_EQ(*beyond, 0u);
}

}  // namespace
}  // namespace ddo
