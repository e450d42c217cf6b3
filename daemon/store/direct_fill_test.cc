// The cold load's direct reads (direct_fill.h): tensors at any file offset land exactly at
// their places in a pre-faulted segment, through aligned chunks; a file that shrank is
// DataLoss; a file system without direct I/O is Unimplemented with nothing written; the page
// cache probe tells a dropped file from a read one.
#include "daemon/store/direct_fill.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "daemon/common/random_id.h"
#include "daemon/common/temp_dir_for_test.h"
#include "daemon/store/safetensors_for_test.h"
#include "gtest/gtest.h"

namespace ddo {
namespace {

constexpr uint64_t kMiB = 1 << 20;

std::string Pattern(size_t size, int seed) {
  std::string bytes(size, '\0');
  for (size_t i = 0; i < size; ++i) bytes[i] = static_cast<char>((i * 31 + seed * 7 + i / 4096) & 0xff);
  return bytes;
}

void DropFromPageCache(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  ::fsync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

class DirectFillTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Odd sizes: no tensor starts or ends on a 4 KiB boundary of the file, and one spans
    // several 16 MiB chunks.
    tensors_ = {{"a", Pattern(5 * kMiB + 13, 1)},
                {"b", Pattern(17, 2)},
                {"c", Pattern(37 * kMiB + 4095, 3)},
                {"d", Pattern(3, 4)}};
    path_ = dir_.Join("model.safetensors");
    ASSERT_TRUE(WriteU8Safetensors(path_, tensors_));
    PoolOptions options;
    options.budget_bytes = 256 * kMiB;
    options.name_namespace = PoolNamespace(dir_.Join("sock"));
    pool_ = std::make_unique<HostPool>(options);
  }
  absl::StatusOr<SafetensorsSet> Open() {
    std::vector<SafetensorsSource> sources;
    sources.push_back(SourceOf(path_));
    return OpenSafetensorsSet(std::move(sources), std::nullopt, {}, &fs_);
  }
  // Places in the segment: in file order, each at a 64-byte boundary after a 1 KiB gap.
  std::vector<TensorEntry> LaidOut(const SafetensorsSet& set) {
    std::vector<TensorEntry> laid_out;
    uint64_t cursor = 0;
    for (const SafetensorsTensor& tensor : set.files[0].tensors) {
      cursor = (cursor + 1024 + 63) / 64 * 64;
      TensorEntry entry;
      entry.name = tensor.name;
      entry.offset = cursor;
      entry.byte_size = tensor.byte_size;
      laid_out.push_back(entry);
      cursor += tensor.byte_size;
    }
    return laid_out;
  }
  std::shared_ptr<PoolSegment> Prefaulted(uint64_t bytes) {
    auto segment = pool_->AllocateReserve(bytes, nullptr);
    EXPECT_TRUE(segment.ok()) << segment.status();
    EXPECT_TRUE(pool_->TakeFromReserve(**segment, bytes).ok());
    (*segment)->MarkDiscarded();
    return *segment;
  }

  TempDirForTest dir_;
  FaultInjectingFileSystem fs_;
  std::string path_;
  std::vector<std::pair<std::string, std::string>> tensors_;
  std::unique_ptr<HostPool> pool_;
};

TEST_F(DirectFillTest, TensorsAtAnyOffsetLandExactlyAtTheirPlaces) {
  DropFromPageCache(path_);
  auto set = Open();
  ASSERT_TRUE(set.ok()) << set.status();
  const std::vector<TensorEntry> laid_out = LaidOut(*set);
  auto segment = Prefaulted(laid_out.back().offset + laid_out.back().byte_size);
  std::atomic<uint64_t> written{0};
  uint64_t last_progress = 0;
  absl::Status filled = FillDirect(
      *set, laid_out, *segment, 3, [&](size_t, uint64_t bytes) { written += bytes; },
      [&](uint64_t done, uint64_t total) {
        EXPECT_GE(done, last_progress);
        EXPECT_EQ(total, set->total_bytes);
        last_progress = done;
      },
      [] { return false; }, &fs_);
  ASSERT_TRUE(filled.ok()) << filled;
  EXPECT_EQ(written.load(), set->total_bytes) << "every byte once";
  EXPECT_EQ(last_progress, set->total_bytes);
  for (size_t i = 0; i < laid_out.size(); ++i) {
    const std::string& expected = tensors_[i].second;
    ASSERT_EQ(std::memcmp(segment->data() + laid_out[i].offset, expected.data(), expected.size()),
              0)
        << tensors_[i].first;
  }
}

TEST_F(DirectFillTest, AFileThatShrankIsDataLoss) {
  auto set = Open();
  ASSERT_TRUE(set.ok()) << set.status();
  const std::vector<TensorEntry> laid_out = LaidOut(*set);
  ASSERT_EQ(::truncate(path_.c_str(), 20 * kMiB), 0);  // inside "c"
  auto segment = Prefaulted(laid_out.back().offset + laid_out.back().byte_size);
  absl::Status filled = FillDirect(*set, laid_out, *segment, 2, {}, {}, {}, &fs_);
  EXPECT_TRUE(absl::IsDataLoss(filled)) << filled;
  EXPECT_NE(std::string(filled.message()).find("shrank"), std::string::npos) << filled;
}

TEST_F(DirectFillTest, WithoutDirectIoNothingIsWrittenAndTheCallerFallsBack) {
  auto set = Open();
  ASSERT_TRUE(set.ok()) << set.status();
  const std::vector<TensorEntry> laid_out = LaidOut(*set);
  auto segment = Prefaulted(laid_out.back().offset + laid_out.back().byte_size);
  fs_.FailNth(FileOp::kOpen, EINVAL);  // tmpfs and others refuse O_DIRECT like this
  uint64_t written = 0;
  absl::Status filled = FillDirect(
      *set, laid_out, *segment, 2, [&](size_t, uint64_t bytes) { written += bytes; }, {}, {},
      &fs_);
  EXPECT_TRUE(absl::IsUnimplemented(filled)) << filled;
  EXPECT_EQ(written, 0u);
}

TEST_F(DirectFillTest, ACancelledFillStops) {
  auto set = Open();
  ASSERT_TRUE(set.ok()) << set.status();
  const std::vector<TensorEntry> laid_out = LaidOut(*set);
  auto segment = Prefaulted(laid_out.back().offset + laid_out.back().byte_size);
  absl::Status filled = FillDirect(*set, laid_out, *segment, 2, {}, {}, [] { return true; }, &fs_);
  EXPECT_TRUE(absl::IsCancelled(filled)) << filled;
}

TEST_F(DirectFillTest, TheProbeTellsADroppedFileFromARecentlyReadOne) {
  DropFromPageCache(path_);
  auto set = Open();
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_TRUE(MostlyUncached(*set));
  std::string all(tensors_.size() * 64 * kMiB, '\0');
  const int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  while (::read(fd, all.data(), all.size()) > 0) {
  }
  ::close(fd);
  EXPECT_FALSE(MostlyUncached(*set));
}

}  // namespace
}  // namespace ddo
