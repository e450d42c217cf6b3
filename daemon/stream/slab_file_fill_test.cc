// File: daemon/stream/slab_file_fill_test.cc
//
// FillSlabFromFiles: the bytes of many chunks of a real file reach their slab offsets exactly,
// whatever order the reading threads finish in; a read that fails (the file shrank) and a copy
// that fails stop the fill with an error naming the tensor, and nothing hangs.
#include "daemon/stream/slab_file_fill.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/common/temp_dir_for_test.h"
#include "daemon/store/backing_files.h"

namespace ddo {
namespace {

using ::testing::HasSubstr;

// A slab in host memory that can be told to fail its n-th copy.
class VectorSlab : public ResidentSlab {
 public:
  explicit VectorSlab(uint64_t bytes) : bytes_(bytes, '\0') {}
  absl::Status Copy(uint64_t offset, const void* source, uint64_t bytes) override {
    if (++copies_ == fail_copy_) return absl::InternalError("the device said no");
    if (offset + bytes > bytes_.size()) return absl::InternalError("past the end");
    std::memcpy(bytes_.data() + offset, source, bytes);
    return absl::OkStatus();
  }
  absl::Status Finish() override { return absl::OkStatus(); }
  absl::Status Export(DeviceExport*) const override { return absl::OkStatus(); }
  uint64_t device_bytes() const override { return bytes_.size(); }

  std::string bytes_;
  int copies_ = 0;
  int fail_copy_ = -1;
};

class SlabFileFillTest : public ::testing::Test {
 protected:
  // A file of `bytes` patterned bytes, held as one tensor's backing file.
  ComponentBytes FileOf(uint64_t bytes) {
    content_.resize(bytes);
    for (uint64_t i = 0; i < bytes; ++i) content_[i] = static_cast<char>((i * 131 + 7) % 251);
    path_ = dir_.Join("tensor.bin");
    std::FILE* file = std::fopen(path_.c_str(), "wb");
    EXPECT_NE(file, nullptr);
    EXPECT_EQ(std::fwrite(content_.data(), 1, bytes, file), bytes);
    std::fclose(file);
    SafetensorsSet set;
    SafetensorsFile& only = set.files.emplace_back();
    only.name = path_;
    only.fd = UniqueFd(::open(path_.c_str(), O_RDONLY | O_CLOEXEC));
    only.tensors.push_back({name_, DType::kU8, {static_cast<int64_t>(bytes)}, 0, bytes});
    auto files = BackingFiles::TakeFrom(set);
    EXPECT_TRUE(files.ok()) << files.status();
    return ComponentBytes(std::make_shared<const BackingFiles>(*std::move(files)));
  }

  TempDirForTest dir_;
  std::string path_;
  std::string content_;
  std::string name_ = "blocks.0.weight";
};

TEST_F(SlabFileFillTest, ManyChunksLandAtTheirOffsetsExactly) {
  const uint64_t bytes = 3 * kSlabFileChunkBytes + 12345;
  ComponentBytes host = FileOf(bytes);
  // The file's bytes in two pieces, the second placed first in the slab.
  const uint64_t split = kSlabFileChunkBytes + 777;
  std::vector<SlabFileChunk> chunks;
  AppendSlabFileChunks(bytes - split, FileRange{0, 0, split}, name_, chunks);
  AppendSlabFileChunks(0, FileRange{0, split, bytes - split}, name_, chunks);
  EXPECT_EQ(chunks.size(), 5u);
  VectorSlab slab(bytes);
  ASSERT_TRUE(FillSlabFromFiles(slab, chunks, host, 3).ok());
  EXPECT_EQ(slab.bytes_.substr(bytes - split), content_.substr(0, split));
  EXPECT_EQ(slab.bytes_.substr(0, bytes - split), content_.substr(split));
}

TEST_F(SlabFileFillTest, NothingToReadIsDone) {
  VectorSlab slab(16);
  EXPECT_TRUE(FillSlabFromFiles(slab, {}, ComponentBytes(), 4).ok());
  EXPECT_EQ(slab.copies_, 0);
}

TEST_F(SlabFileFillTest, AFileThatShrankStopsTheFillNamingTheTensor) {
  const uint64_t bytes = 6 * kSlabFileChunkBytes;
  ComponentBytes host = FileOf(bytes);
  ASSERT_EQ(::truncate(path_.c_str(), 2 * kSlabFileChunkBytes), 0);
  std::vector<SlabFileChunk> chunks;
  AppendSlabFileChunks(0, FileRange{0, 0, bytes}, name_, chunks);
  VectorSlab slab(bytes);
  absl::Status filled = FillSlabFromFiles(slab, chunks, host, 4);
  EXPECT_FALSE(filled.ok());
  EXPECT_THAT(filled.message(), HasSubstr("filling the slab with 'blocks.0.weight'"));
}

TEST_F(SlabFileFillTest, ACopyThatFailsStopsTheReaders) {
  const uint64_t bytes = 8 * kSlabFileChunkBytes;
  ComponentBytes host = FileOf(bytes);
  std::vector<SlabFileChunk> chunks;
  AppendSlabFileChunks(0, FileRange{0, 0, bytes}, name_, chunks);
  VectorSlab slab(bytes);
  slab.fail_copy_ = 2;
  absl::Status filled = FillSlabFromFiles(slab, chunks, host, 2);
  EXPECT_EQ(filled.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(filled.message(), HasSubstr("'blocks.0.weight': the device said no"));
  EXPECT_EQ(slab.copies_, 2);  // no copy after the failure
}

}  // namespace
}  // namespace ddo
