#include "daemon/store/direct_reader.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <string>
#include <utility>
#include <vector>

#include "daemon/common/temp_dir_for_test.h"
#include "daemon/layout/tensor_table.h"
#include "daemon/store/safetensors_for_test.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ddo {
namespace {

using ::testing::HasSubstr;

std::string Pattern(size_t bytes, int seed) {
  std::string out(bytes, '\0');
  for (size_t i = 0; i < bytes; ++i) out[i] = static_cast<char>((i * 131 + seed) & 0xff);
  return out;
}

class DirectReaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = dir_.Join("m.safetensors");
    ASSERT_TRUE(WriteU8Safetensors(path_, {{"x", first_}, {"y", second_}}));
    std::vector<SafetensorsSource> sources;
    sources.push_back(SourceOf(path_));
    auto set = OpenSafetensorsSet(std::move(sources), std::nullopt);
    ASSERT_TRUE(set.ok()) << set.status();
    auto files = BackingFiles::TakeFrom(*set);
    ASSERT_TRUE(files.ok()) << files.status();
    files_ = *std::move(files);
  }

  TempDirForTest dir_;
  std::string path_;
  const std::string first_ = Pattern(5000, 1);
  const std::string second_ = Pattern(300, 7);
  BackingFiles files_;
};

TEST_F(DirectReaderTest, ReadsEachTensorsBytes) {
  for (size_t i = 0; i < 2; ++i) {
    const FileRange& range = files_.ranges()[i];
    std::string out(range.bytes, '\0');
    ASSERT_TRUE(ReadRange(files_.FileOf(range), range, out.data()).ok());
    EXPECT_EQ(out, i == 0 ? first_ : second_);
  }
  // One coalesced read of both.
  const std::vector<FileRange> both = CoalesceRanges(files_.ranges(), 0);
  ASSERT_EQ(both.size(), 1u);
  std::string out(both[0].bytes, '\0');
  ASSERT_TRUE(ReadRange(files_.files()[0], both[0], out.data()).ok());
  EXPECT_EQ(out, first_ + second_);
}

// Gives at most 333 bytes per read, as a slow or signalled read may.
class ShortReadFileSystem : public FaultInjectingFileSystem {
 public:
  absl::StatusOr<size_t> Read(int fd, uint64_t offset, char* destination, size_t bytes,
                              absl::string_view name) override {
    return FaultInjectingFileSystem::Read(fd, offset, destination, std::min<size_t>(bytes, 333),
                                          name);
  }
};

TEST_F(DirectReaderTest, ShortReadsAreLoopedOver) {
  ShortReadFileSystem fs;
  const FileRange& range = files_.ranges()[0];
  std::string out(range.bytes, '\0');
  ASSERT_TRUE(ReadRange(files_.FileOf(range), range, out.data(), &fs).ok());
  EXPECT_EQ(out, first_);
  EXPECT_EQ(fs.Calls(FileOp::kRead), static_cast<int>((range.bytes + 332) / 333));
}

TEST_F(DirectReaderTest, AFailedReadNamesTheFile) {
  FaultInjectingFileSystem fs;
  fs.FailNth(FileOp::kRead, EIO);
  const FileRange& range = files_.ranges()[0];
  std::string out(range.bytes, '\0');
  const absl::Status read = ReadRange(files_.FileOf(range), range, out.data(), &fs);
  EXPECT_FALSE(read.ok());
  EXPECT_THAT(std::string(read.message()), HasSubstr("m.safetensors"));
}

TEST_F(DirectReaderTest, AReadCutShortIsDataLoss) {
  FaultInjectingFileSystem fs;
  const FileRange& range = files_.ranges()[0];
  fs.TruncateReadsAt(range.offset + 1000);
  std::string out(range.bytes, '\0');
  const absl::Status read = ReadRange(files_.FileOf(range), range, out.data(), &fs);
  EXPECT_TRUE(absl::IsDataLoss(read)) << read;
  EXPECT_THAT(std::string(read.message()), HasSubstr("m.safetensors ended at offset " +
                                                     std::to_string(range.offset + 1000)));
}

TEST_F(DirectReaderTest, AFileTruncatedAfterTheLoadIsDataLossNotACrash) {
  const FileRange& range = files_.ranges()[1];  // the last tensor
  ASSERT_EQ(::truncate(path_.c_str(), static_cast<off_t>(range.offset + 10)), 0);
  std::string out(range.bytes, '\0');
  const absl::Status read = ReadRange(files_.FileOf(range), range, out.data());
  EXPECT_TRUE(absl::IsDataLoss(read)) << read;
  EXPECT_THAT(std::string(read.message()), HasSubstr("m.safetensors"));
  EXPECT_THAT(std::string(read.message()), HasSubstr(std::to_string(range.offset + 10)));
  EXPECT_THAT(std::string(read.message()), ::testing::Not(HasSubstr(dir_.path())));
}

TEST_F(DirectReaderTest, NoBufferOrNoDescriptorIsInvalid) {
  const FileRange& range = files_.ranges()[0];
  EXPECT_TRUE(absl::IsInvalidArgument(ReadRange(files_.FileOf(range), range, nullptr)));
  std::string out(range.bytes, '\0');
  EXPECT_TRUE(absl::IsInvalidArgument(ReadRange(BackingFile{}, range, out.data())));
}

TEST_F(DirectReaderTest, ContentHashOfFilesStreamsThroughASmallBuffer) {
  ContentHasher expected;
  expected.Update(first_.data(), first_.size());
  expected.Update(second_.data(), second_.size());
  for (uint64_t buffer : {uint64_t{1}, uint64_t{4096}, uint64_t{1} << 20}) {
    auto hash = ContentHashOfFiles(files_, buffer, {});
    ASSERT_TRUE(hash.ok()) << hash.status();
    EXPECT_EQ(*hash, expected.Digest()) << buffer;
  }
  EXPECT_TRUE(absl::IsCancelled(ContentHashOfFiles(files_, 4096, [] { return true; }).status()));
  FaultInjectingFileSystem fs;
  fs.TruncateReadsAt(files_.ranges()[1].offset);
  EXPECT_TRUE(absl::IsDataLoss(ContentHashOfFiles(files_, 4096, {}, &fs).status()));
}

}  // namespace
}  // namespace ddo
