#include "daemon/store/parallel_reader.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "daemon/common/file_system.h"
#include "daemon/common/temp_dir_for_test.h"
#include "ddo/wire/unique_fd.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ddo {
namespace {

using ::testing::HasSubstr;

std::string RandomBytes(size_t size, uint32_t seed) {
  std::mt19937 random(seed);
  std::string bytes(size, '\0');
  for (char& c : bytes) {
    c = static_cast<char>(random() & 0xff);
  }
  return bytes;
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good());
}

class ParallelReaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = dir_.Join("data.bin");
    // A few MiB and an odd tail so that chunks do not line up with the jobs.
    contents_ = RandomBytes((3 << 20) + 12345, 42);
    WriteFile(path_, contents_);
    fd_ = UniqueFd(::open(path_.c_str(), O_RDONLY | O_CLOEXEC));
    ASSERT_TRUE(fd_.valid());
  }

  // The whole file as jobs of uneven sizes (one empty), in an order other than the file's.
  std::vector<ReadJob> JobsFor(std::string* destination) const {
    destination->assign(contents_.size(), '\0');
    const uint64_t a = 1000;
    const uint64_t b = (1 << 20) + 7;
    std::vector<ReadJob> jobs;
    jobs.push_back({fd_.get(), a, destination->data() + a, b - a, path_});
    jobs.push_back({fd_.get(), 0, destination->data(), a, path_});
    jobs.push_back({fd_.get(), b, destination->data() + b, 0, path_});
    jobs.push_back({fd_.get(), b, destination->data() + b, contents_.size() - b, path_});
    return jobs;
  }

  TempDirForTest dir_;
  std::string path_;
  std::string contents_;
  UniqueFd fd_;
};

TEST_F(ParallelReaderTest, ReadsEveryByteWithManySmallChunks) {
  std::string destination;
  const std::vector<ReadJob> jobs = JobsFor(&destination);
  std::vector<uint64_t> reports;  // progress calls never overlap
  const absl::Status status = ReadInParallel(
      jobs, 4, [&](uint64_t done) { reports.push_back(done); }, [] { return false; },
      /*chunk_bytes=*/4096);
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_TRUE(destination == contents_);
  ASSERT_FALSE(reports.empty());
  EXPECT_EQ(reports.back(), contents_.size());
  for (size_t i = 1; i < reports.size(); ++i) {
    EXPECT_LE(reports[i - 1], reports[i]);
  }
}

// Jobs written through a descriptor (a pool segment's): every byte lands at its offset, in
// pieces of the reader threads' buffers, chunks that do not line up with them included.
TEST_F(ParallelReaderTest, JobsWrittenThroughADescriptorLandAtTheirOffsets) {
  const std::string target_path = dir_.Join("target.bin");
  UniqueFd target(::open(target_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  ASSERT_TRUE(target.valid());
  const uint64_t gap = 4096;  // the target holds the file after a gap, as a layout might
  std::vector<ReadJob> jobs;
  const uint64_t half = contents_.size() / 2 + 3;
  jobs.push_back({fd_.get(), half, nullptr, contents_.size() - half, path_, target.get(),
                  gap + half, "target"});
  jobs.push_back({fd_.get(), 0, nullptr, half, path_, target.get(), gap, "target"});
  const absl::Status status =
      ReadInParallel(jobs, 3, nullptr, nullptr, /*chunk_bytes=*/(1 << 20) + 4095);
  ASSERT_TRUE(status.ok()) << status;
  std::string written(gap + contents_.size(), '\0');
  ASSERT_EQ(::pread(target.get(), written.data(), written.size(), 0),
            static_cast<ssize_t>(written.size()));
  EXPECT_TRUE(written.substr(gap) == contents_);
}

TEST_F(ParallelReaderTest, AFailedWriteStopsTheReadAndNamesTheDestination) {
  FaultInjectingFileSystem fs;
  const std::string target_path = dir_.Join("target.bin");
  UniqueFd target(::open(target_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  fs.FailNth(FileOp::kWrite, ENOSPC, 2);
  const absl::Status status = ReadInParallel(
      {{fd_.get(), 0, nullptr, contents_.size(), path_, target.get(), 0, "/ddo-segment"}}, 2,
      nullptr, nullptr, kDefaultReadChunkBytes, &fs);
  EXPECT_TRUE(absl::IsResourceExhausted(status)) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr("/ddo-segment"));
  EXPECT_THAT(std::string(status.message()), HasSubstr("No space left on device"));
}

TEST_F(ParallelReaderTest, DefaultChunksAndEmptyCallbacks) {
  std::string destination;
  ASSERT_TRUE(ReadInParallel(JobsFor(&destination), 3, nullptr, nullptr).ok());
  EXPECT_TRUE(destination == contents_);
}

TEST_F(ParallelReaderTest, NoJobsIsFine) {
  uint64_t reported = 1;
  EXPECT_TRUE(ReadInParallel(
                  {}, 4, [&](uint64_t done) { reported = done; }, nullptr)
                  .ok());
  EXPECT_EQ(reported, 0u);
}

TEST_F(ParallelReaderTest, CancellationStopsTheRead) {
  std::string destination;
  std::atomic<int> asked{0};
  uint64_t last_report = 0;
  const absl::Status status = ReadInParallel(
      JobsFor(&destination), 4, [&](uint64_t done) { last_report = done; },
      [&] { return asked.fetch_add(1) >= 20; }, /*chunk_bytes=*/4096);
  EXPECT_TRUE(absl::IsCancelled(status)) << status;
  EXPECT_LT(last_report, contents_.size());  // no final report after a failure
}

TEST_F(ParallelReaderTest, CancelledBeforeStarting) {
  std::string destination;
  EXPECT_TRUE(absl::IsCancelled(ReadInParallel(
      JobsFor(&destination), 2, nullptr, [] { return true; }, 4096)));
}

TEST_F(ParallelReaderTest, AFileShorterThanTheRangeIsDataLoss) {
  std::string destination(8192, '\0');
  const uint64_t offset = contents_.size() - 100;
  const std::vector<ReadJob> jobs = {
      {fd_.get(), 0, destination.data(), 4096, path_},
      {fd_.get(), offset, destination.data() + 4096, 4096, path_},
  };
  const absl::Status status = ReadInParallel(jobs, 4, nullptr, nullptr, 1024);
  EXPECT_TRUE(absl::IsDataLoss(status)) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr(path_));
  EXPECT_THAT(std::string(status.message()), HasSubstr("shrank"));
}

TEST_F(ParallelReaderTest, ReadErrorsNameTheFile) {
  char buffer[16];
  const absl::Status status = ReadInParallel(
      {{-1, 0, buffer, sizeof(buffer), "/no/such.safetensors"}}, 1, nullptr, nullptr);
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(std::string(status.message()), HasSubstr("/no/such.safetensors"));
}

TEST_F(ParallelReaderTest, AnInjectedReadErrorStopsEveryThreadAndNamesTheFile) {
  FaultInjectingFileSystem fs;
  fs.FailNth(FileOp::kRead, EIO, 5);
  std::string destination;
  // 4 KiB chunks: about 780 reads for the whole file, so that threads that did not stop would
  // read far past the failure however the scheduler runs them (with 64 KiB chunks, 48 reads,
  // a loaded 2-core machine let the others finish before the failing thread said so).
  constexpr uint64_t kChunk = 4 << 10;
  const absl::Status status =
      ReadInParallel(JobsFor(&destination), 4, nullptr, nullptr, kChunk, &fs);
  EXPECT_TRUE(absl::IsInternal(status)) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr("read " + path_ + " at offset "));
  EXPECT_THAT(std::string(status.message()), HasSubstr("Input/output error"));
  EXPECT_LT(fs.Calls(FileOp::kRead), static_cast<int>(contents_.size() / kChunk / 2))
      << "the other threads stopped";
}

TEST_F(ParallelReaderTest, AFileTruncatedUnderTheReaderIsDataLoss) {
  FaultInjectingFileSystem fs;
  std::string destination;
  ASSERT_TRUE(ReadInParallel(JobsFor(&destination), 3, nullptr, nullptr, 1 << 20, &fs).ok());
  EXPECT_EQ(destination, contents_);
  fs.TruncateReadsAt(contents_.size() / 2);
  const absl::Status status =
      ReadInParallel(JobsFor(&destination), 3, nullptr, nullptr, 1 << 20, &fs);
  EXPECT_TRUE(absl::IsDataLoss(status)) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr(path_ + " shrank while reading"));
}

TEST_F(ParallelReaderTest, BadArguments) {
  std::string destination;
  EXPECT_TRUE(absl::IsInvalidArgument(
      ReadInParallel(JobsFor(&destination), 2, nullptr, nullptr, /*chunk_bytes=*/0)));
  EXPECT_TRUE(absl::IsInvalidArgument(
      ReadInParallel({{fd_.get(), 0, nullptr, 10, path_}}, 1, nullptr, nullptr)));
  char buffer[16];
  EXPECT_TRUE(absl::IsInvalidArgument(ReadInParallel(
      {{fd_.get(), ~uint64_t{0} - 4, buffer, sizeof(buffer), path_}}, 1, nullptr, nullptr)));
  // threads < 1 still reads, on the calling thread.
  EXPECT_TRUE(ReadInParallel(JobsFor(&destination), 0, nullptr, nullptr, 65536).ok());
  EXPECT_TRUE(destination == contents_);
}

TEST_F(ParallelReaderTest, ReadFullyReadsAnExactRange) {
  std::string destination(5000, '\0');
  ASSERT_TRUE(ReadFully(fd_.get(), 777, destination.data(), destination.size(), path_).ok());
  EXPECT_TRUE(destination == contents_.substr(777, 5000));
}

}  // namespace
}  // namespace ddo
