// Streamed uploads (upload_pipes.h): the streams cut the tensors into contiguous runs of about
// equal bytes; what the writers send lands at the tensors' offsets; a stream that ends early is
// DataLoss, silence past the idle limit DeadlineExceeded, cancellation Cancelled; and once the
// write ends are handed out ddod holds none, so a writer's end is seen as end of file.
#include "daemon/store/upload_pipes.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "daemon/common/temp_dir_for_test.h"
#include "gtest/gtest.h"

namespace ddo {
namespace {

constexpr uint64_t kMiB = 1 << 20;

std::string Pattern(size_t size, int seed) {
  std::string bytes(size, '\0');
  for (size_t i = 0; i < size; ++i) bytes[i] = static_cast<char>((i * 13 + seed * 29 + i / 997) & 0xff);
  return bytes;
}

TensorEntry Entry(std::string name, uint64_t offset, uint64_t bytes) {
  TensorEntry entry;
  entry.name = std::move(name);
  entry.offset = offset;
  entry.byte_size = bytes;
  return entry;
}

// Writes `data` whole to `fd` (blocking), then closes it; false when a write failed.
bool WriteAll(UniqueFd fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t wrote = ::write(fd.get(), data.data() + done, data.size() - done);
    if (wrote <= 0) return false;
    done += static_cast<size_t>(wrote);
  }
  return true;
}

TEST(AssignStreamsTest, CutsTheTensorsInOffsetOrderIntoRunsOfAboutEqualBytes) {
  // Listed out of offset order; one empty tensor; one tensor of another segment.
  std::vector<TensorEntry> tensors = {Entry("c", 300, 100), Entry("a", 0, 100),
                                      Entry("empty", 100, 0), Entry("b", 100, 200),
                                      Entry("d", 400, 100)};
  TensorEntry shared = Entry("shared", 0, 50);
  shared.segment = 1;
  tensors.push_back(shared);
  const std::vector<int> assignment = AssignStreams(tensors, 2);
  // 500 bytes in all: a (0) and b (100) start in the first half, c (300) and d (400) after.
  EXPECT_EQ(assignment, (std::vector<int>{1, 0, -1, 0, 1, -1}));
  const std::vector<std::vector<ByteRange>> ranges = StreamRanges(tensors, assignment, 2);
  ASSERT_EQ(ranges.size(), 2u);
  ASSERT_EQ(ranges[0].size(), 2u);
  EXPECT_EQ(ranges[0][0].offset, 0u);
  EXPECT_EQ(ranges[0][1].offset, 100u);
  ASSERT_EQ(ranges[1].size(), 2u);
  EXPECT_EQ(ranges[1][0].offset, 300u);
  EXPECT_EQ(ranges[1][1].offset, 400u);
}

TEST(AssignStreamsTest, MoreStreamsThanTensorsLeavesSomeEmpty) {
  const std::vector<TensorEntry> tensors = {Entry("a", 0, 10)};
  EXPECT_EQ(AssignStreams(tensors, 4), (std::vector<int>{0}));
  EXPECT_TRUE(StreamRanges(tensors, {0}, 4)[3].empty());
}

TEST(UploadPipesTest, RefusesACountOutsideItsBounds) {
  EXPECT_EQ(UploadPipes::Create(0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(UploadPipes::Create(kMaxUploadStreams + 1).status().code(),
            absl::StatusCode::kInvalidArgument);
}

class UploadPipesFillTest : public ::testing::Test {
 protected:
  void SetUp() override {
    PoolOptions options;
    options.budget_bytes = 64 * kMiB;
    options.name_namespace = PoolNamespace(dir_.Join("sock"));
    pool_ = std::make_unique<HostPool>(options);
    absl::StatusOr<std::shared_ptr<PoolSegment>> segment = pool_->Allocate(24 * kMiB);
    ASSERT_TRUE(segment.ok()) << segment.status();
    segment_ = *segment;
    // Odd sizes and places; three streams.
    tensors_ = {Entry("a", 0, 5 * kMiB + 13), Entry("b", 6 * kMiB, 17),
                Entry("c", 7 * kMiB + 64, 9 * kMiB + 4095), Entry("d", 17 * kMiB, 3 * kMiB)};
    for (size_t i = 0; i < tensors_.size(); ++i) {
      bytes_.push_back(Pattern(tensors_[i].byte_size, static_cast<int>(i)));
    }
    assignment_ = AssignStreams(tensors_, kStreams);
    ranges_ = StreamRanges(tensors_, assignment_, kStreams);
  }
  void TearDown() override {
    if (segment_ != nullptr) segment_->MarkDiscarded();  // leaves /dev/shm with the test
  }
  // What stream `stream` carries: its tensors' bytes in offset order.
  std::string StreamBytes(int stream) const {
    std::string data;
    for (const ByteRange& range : ranges_[static_cast<size_t>(stream)]) {
      for (size_t i = 0; i < tensors_.size(); ++i) {
        if (tensors_[i].offset == range.offset) data += bytes_[i];
      }
    }
    return data;
  }

  static constexpr int kStreams = 3;
  TempDirForTest dir_;
  std::unique_ptr<HostPool> pool_;
  std::shared_ptr<PoolSegment> segment_;
  std::vector<TensorEntry> tensors_;
  std::vector<std::string> bytes_;
  std::vector<int> assignment_;
  std::vector<std::vector<ByteRange>> ranges_;
};

TEST_F(UploadPipesFillTest, WhatTheWritersSendLandsAtTheTensorsOffsets) {
  absl::StatusOr<std::unique_ptr<UploadPipes>> pipes = UploadPipes::Create(kStreams);
  ASSERT_TRUE(pipes.ok()) << pipes.status();
  std::vector<UniqueFd> write_ends = (*pipes)->TakeWriteEnds();
  ASSERT_EQ(write_ends.size(), static_cast<size_t>(kStreams));
  EXPECT_TRUE((*pipes)->TakeWriteEnds().empty());
  std::vector<std::thread> writers;
  std::atomic<int> failed{0};
  for (int i = 0; i < kStreams; ++i) {
    writers.emplace_back([&, i, fd = std::move(write_ends[static_cast<size_t>(i)])]() mutable {
      if (!WriteAll(std::move(fd), StreamBytes(i))) ++failed;
    });
  }
  WorkProgress progress;
  const absl::Status filled =
      (*pipes)->Fill(*segment_, ranges_, &progress, [] { return false; });
  for (std::thread& writer : writers) writer.join();
  ASSERT_TRUE(filled.ok()) << filled;
  EXPECT_EQ(failed.load(), 0);
  uint64_t total = 0;
  for (size_t i = 0; i < tensors_.size(); ++i) {
    total += tensors_[i].byte_size;
    EXPECT_EQ(std::memcmp(segment_->data() + tensors_[i].offset, bytes_[i].data(),
                          bytes_[i].size()),
              0)
        << tensors_[i].name;
  }
  EXPECT_EQ(progress.done(), total);
}

TEST_F(UploadPipesFillTest, AStreamThatEndsEarlyIsDataLossAndStopsTheOthers) {
  absl::StatusOr<std::unique_ptr<UploadPipes>> pipes = UploadPipes::Create(kStreams);
  ASSERT_TRUE(pipes.ok()) << pipes.status();
  std::vector<UniqueFd> write_ends = (*pipes)->TakeWriteEnds();
  // Stream 0 sends half its bytes and closes; the others send nothing and stay open.
  std::thread writer([fd = std::move(write_ends[0]), half = StreamBytes(0).substr(0, 1000)]() mutable {
    WriteAll(std::move(fd), half);
  });
  const absl::Status filled = (*pipes)->Fill(*segment_, ranges_, nullptr, [] { return false; });
  writer.join();
  EXPECT_EQ(filled.code(), absl::StatusCode::kDataLoss) << filled;
  EXPECT_NE(filled.message().find("stream 0 ended after 1000 B"), std::string::npos) << filled;
}

TEST_F(UploadPipesFillTest, SilenceOnEveryStreamPastTheIdleLimitIsDeadlineExceeded) {
  absl::StatusOr<std::unique_ptr<UploadPipes>> pipes = UploadPipes::Create(kStreams);
  ASSERT_TRUE(pipes.ok()) << pipes.status();
  std::vector<UniqueFd> write_ends = (*pipes)->TakeWriteEnds();  // held open, never written
  const absl::Status filled = (*pipes)->Fill(*segment_, ranges_, nullptr, [] { return false; },
                                             absl::Milliseconds(300));
  EXPECT_EQ(filled.code(), absl::StatusCode::kDeadlineExceeded) << filled;
}

TEST_F(UploadPipesFillTest, CancellationEndsTheFill) {
  absl::StatusOr<std::unique_ptr<UploadPipes>> pipes = UploadPipes::Create(kStreams);
  ASSERT_TRUE(pipes.ok()) << pipes.status();
  std::vector<UniqueFd> write_ends = (*pipes)->TakeWriteEnds();
  std::atomic<bool> cancelled{false};
  std::thread canceller([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    cancelled = true;
  });
  const absl::Status filled =
      (*pipes)->Fill(*segment_, ranges_, nullptr, [&] { return cancelled.load(); });
  canceller.join();
  EXPECT_EQ(filled.code(), absl::StatusCode::kCancelled) << filled;
}

TEST_F(UploadPipesFillTest, AFillBeforeTheWriteEndsWereTakenSeesEndOfFileNotAHang) {
  // ddod never waits on a write end of its own: Fill drops those it still holds.
  absl::StatusOr<std::unique_ptr<UploadPipes>> pipes = UploadPipes::Create(kStreams);
  ASSERT_TRUE(pipes.ok()) << pipes.status();
  const absl::Status filled = (*pipes)->Fill(*segment_, ranges_, nullptr, [] { return false; });
  EXPECT_EQ(filled.code(), absl::StatusCode::kDataLoss) << filled;
}

}  // namespace
}  // namespace ddo
