#include "daemon/store/backing_files.h"

#include <fcntl.h>

#include <cerrno>
#include <string>
#include <utility>
#include <vector>

#include "daemon/common/temp_dir_for_test.h"
#include "daemon/store/safetensors_for_test.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ddo {
namespace {

using ::testing::ElementsAre;

bool IsOpen(int fd) { return ::fcntl(fd, F_GETFD) != -1 || errno != EBADF; }

class BackingFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(WriteU8Safetensors(dir_.Join("a.safetensors"),
                                   {{"a0", std::string(100, 'a')}, {"a1", std::string(28, 'b')}}));
    ASSERT_TRUE(WriteU8Safetensors(dir_.Join("b.safetensors"), {{"b0", std::string(7, 'c')}}));
  }
  SafetensorsSet OpenSet(FileSystem* fs = nullptr) {
    std::vector<SafetensorsSource> sources;
    sources.push_back(SourceOf(dir_.Join("a.safetensors")));
    sources.push_back(SourceOf(dir_.Join("b.safetensors")));
    auto set = OpenSafetensorsSet(std::move(sources), std::nullopt, {}, fs);
    EXPECT_TRUE(set.ok()) << set.status();
    return set.ok() ? *std::move(set) : SafetensorsSet{};
  }
  TempDirForTest dir_;
};

TEST_F(BackingFilesTest, TakesTheSetsDescriptorsAndEveryTensorsRange) {
  SafetensorsSet set = OpenSet();
  ASSERT_EQ(set.files.size(), 2u);
  const int first_fd = set.files[0].fd.get();
  const uint64_t a1_offset = set.files[0].tensors[1].file_offset;
  auto files = BackingFiles::TakeFrom(set);
  ASSERT_TRUE(files.ok()) << files.status();
  // Moved out, not duplicated: the set has none left; the same descriptor is held.
  EXPECT_FALSE(set.files[0].fd.valid());
  EXPECT_FALSE(set.files[1].fd.valid());
  ASSERT_EQ(files->descriptors(), 2u);
  EXPECT_EQ(files->files()[0].get(), first_fd);
  EXPECT_EQ(files->files()[0].name, "a.safetensors");  // the base name, never the path
  EXPECT_EQ(files->files()[1].name, "b.safetensors");
  EXPECT_EQ(files->files()[0].size, set.files[0].file_size);
  EXPECT_EQ(files->files()[0].identity.size, set.files[0].file_size);
  EXPECT_NE(files->files()[0].identity.inode, files->files()[1].identity.inode);
  EXPECT_EQ(files->tensor_bytes(), 135u);
  EXPECT_THAT(files->ranges(),
              ElementsAre(FileRange{0, set.files[0].data_start, 100}, FileRange{0, a1_offset, 28},
                          FileRange{1, set.files[1].data_start, 7}));
  EXPECT_EQ(&files->FileOf(files->ranges()[2]), &files->files()[1]);
}

TEST_F(BackingFilesTest, DescriptorsCloseWithTheLastCopy) {
  SafetensorsSet set = OpenSet();
  auto files = BackingFiles::TakeFrom(set);
  ASSERT_TRUE(files.ok()) << files.status();
  const int fd = files->files()[0].get();
  set = SafetensorsSet{};
  EXPECT_TRUE(IsOpen(fd));  // the set no longer owns it
  BackingFile reader_copy = files->files()[0];
  *files = BackingFiles{};
  EXPECT_TRUE(IsOpen(fd));  // a reader's copy keeps it
  reader_copy = BackingFile{};
  EXPECT_FALSE(IsOpen(fd));
}

TEST_F(BackingFilesTest, AFailedStatIsReported) {
  SafetensorsSet set = OpenSet();
  FaultInjectingFileSystem fs;
  fs.FailNth(FileOp::kStat, EIO);
  auto files = BackingFiles::TakeFrom(set, &fs);
  EXPECT_FALSE(files.ok());
  EXPECT_THAT(std::string(files.status().message()), ::testing::HasSubstr("a.safetensors"));
}

TEST_F(BackingFilesTest, ASetWithoutDescriptorsIsRefused) {
  SafetensorsSet set = OpenSet();
  set.files[1].fd.Reset();
  auto files = BackingFiles::TakeFrom(set);
  EXPECT_TRUE(absl::IsFailedPrecondition(files.status())) << files.status();
}

TEST(BaseNameTest, KeepsWhatFollowsTheLastSlash) {
  EXPECT_EQ(BaseName("/a/b/c.safetensors"), "c.safetensors");
  EXPECT_EQ(BaseName("c.safetensors"), "c.safetensors");
  EXPECT_EQ(BaseName("dir/"), "");
}

}  // namespace
}  // namespace ddo
