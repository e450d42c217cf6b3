#include "daemon/store/parallel_reader.h"

#include <fcntl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <limits>
#include <set>
#include <memory>
#include <mutex>
#include <system_error>
#include <thread>

#include "absl/strings/str_cat.h"
#include "daemon/common/status_macros.h"

namespace ddo {
namespace {

// Linux transfers at most 0x7ffff000 bytes per read; stay well under it.
constexpr uint64_t kMaxBytesPerSyscall = uint64_t{1} << 30;
constexpr uint64_t kMaxOffset = static_cast<uint64_t>(std::numeric_limits<off_t>::max());
constexpr auto kProgressInterval = std::chrono::milliseconds(50);
// A reader thread's buffer for jobs written through a descriptor: small enough to stay in the
// core's cache between the read and the write, large enough that system calls cost nothing.
constexpr uint64_t kBounceBytes = uint64_t{1} << 20;

std::string Describe(absl::string_view path, int fd) {
  return path.empty() ? absl::StrCat("fd ", fd) : std::string(path);
}

struct Chunk {
  size_t job;
  uint64_t offset_in_job;
  uint64_t bytes;
};

// What the worker threads share.
class ReadRun {
 public:
  ReadRun(const std::vector<ReadJob>& jobs, std::vector<Chunk> chunks,
          const std::function<void(uint64_t)>& progress, const std::function<bool()>& cancelled,
          const std::function<void(size_t, uint64_t)>& chunk_done, FileSystem* fs)
      : fs_(fs),
        jobs_(jobs),
        chunks_(std::move(chunks)),
        progress_(progress),
        cancelled_(cancelled),
        chunk_done_(chunk_done),
        last_report_(std::chrono::steady_clock::now()) {}

  void Work() {
    std::unique_ptr<char[]> bounce;
    while (!stop_.load(std::memory_order_relaxed)) {
      const size_t index = next_chunk_.fetch_add(1, std::memory_order_relaxed);
      if (index >= chunks_.size()) {
        return;
      }
      if (cancelled_ && cancelled_()) {
        Fail(absl::CancelledError("reading was cancelled"));
        return;
      }
      const Chunk& chunk = chunks_[index];
      const ReadJob& job = jobs_[chunk.job];
      absl::Status status;
      if (job.destination_fd >= 0) {
        if (bounce == nullptr) bounce = std::make_unique<char[]>(kBounceBytes);
        status = CopyThrough(job, chunk, bounce.get());
      } else {
        status = ReadFully(job.fd, job.file_offset + chunk.offset_in_job,
                           job.destination + chunk.offset_in_job, chunk.bytes, job.path, fs_);
      }
      if (!status.ok()) {
        Fail(std::move(status));
        return;
      }
      if (chunk_done_) chunk_done_(chunk.job, chunk.bytes);
      bytes_done_.fetch_add(chunk.bytes, std::memory_order_relaxed);
      MaybeReportProgress();
    }
  }

  absl::Status result() {
    std::lock_guard<std::mutex> lock(error_mu_);
    return first_error_;
  }
  uint64_t bytes_done() const { return bytes_done_.load(); }

 private:
  absl::Status CopyThrough(const ReadJob& job, const Chunk& chunk, char* bounce) {
    for (uint64_t done = 0; done < chunk.bytes; done += kBounceBytes) {
      const uint64_t piece = std::min(kBounceBytes, chunk.bytes - done);
      const uint64_t in_job = chunk.offset_in_job + done;
      DDO_RETURN_IF_ERROR(ReadFully(job.fd, job.file_offset + in_job, bounce, piece, job.path, fs_));
      DDO_RETURN_IF_ERROR(fs_->WriteAt(job.destination_fd, job.destination_offset + in_job, bounce,
                                       piece, job.destination_name));
    }
    return absl::OkStatus();
  }

  void Fail(absl::Status status) {
    std::lock_guard<std::mutex> lock(error_mu_);
    if (first_error_.ok()) {
      first_error_ = std::move(status);
    }
    stop_.store(true);
  }

  // Whoever finds the interval over reports; the others carry on reading rather than wait.
  void MaybeReportProgress() {
    if (!progress_) {
      return;
    }
    std::unique_lock<std::mutex> lock(progress_mu_, std::try_to_lock);
    if (!lock.owns_lock()) {
      return;
    }
    const auto now = std::chrono::steady_clock::now();
    if (now - last_report_ < kProgressInterval) {
      return;
    }
    last_report_ = now;
    // Read under the lock so that reports never go backwards.
    progress_(bytes_done_.load());
  }

  FileSystem* const fs_;
  const std::vector<ReadJob>& jobs_;
  const std::vector<Chunk> chunks_;
  const std::function<void(uint64_t)>& progress_;
  const std::function<bool()>& cancelled_;
  const std::function<void(size_t, uint64_t)>& chunk_done_;

  std::atomic<size_t> next_chunk_{0};
  std::atomic<uint64_t> bytes_done_{0};
  std::atomic<bool> stop_{false};

  std::mutex progress_mu_;
  std::chrono::steady_clock::time_point last_report_;  // guarded by progress_mu_

  std::mutex error_mu_;
  absl::Status first_error_;  // guarded by error_mu_
};

}  // namespace

absl::Status ReadFully(int fd, uint64_t file_offset, char* destination, uint64_t bytes,
                       absl::string_view path, FileSystem* fs) {
  if (fs == nullptr) fs = FileSystem::Default();
  if (bytes == 0) {
    return absl::OkStatus();
  }
  if (destination == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("read of ", Describe(path, fd), ": no destination"));
  }
  if (file_offset > kMaxOffset || bytes > kMaxOffset - file_offset) {
    return absl::InvalidArgumentError(absl::StrCat("read of ", Describe(path, fd), ": range ",
                                                   file_offset, "+", bytes, " is too large"));
  }
  uint64_t done = 0;
  while (done < bytes) {
    const size_t want = static_cast<size_t>(std::min(bytes - done, kMaxBytesPerSyscall));
    DDO_ASSIGN_OR_RETURN(const size_t got, fs->Read(fd, file_offset + done, destination + done,
                                                    want, Describe(path, fd)));
    if (got == 0) {
      return absl::DataLossError(absl::StrCat(
          Describe(path, fd), " shrank while reading: it ends before offset ", file_offset + done,
          " (wanted ", bytes, " bytes from offset ", file_offset, ")"));
    }
    done += static_cast<uint64_t>(got);
  }
  return absl::OkStatus();
}

absl::Status ReadInParallel(const std::vector<ReadJob>& jobs, int threads,
                            const std::function<void(uint64_t)>& progress,
                            const std::function<bool()>& cancelled, uint64_t chunk_bytes,
                            FileSystem* fs,
                            const std::function<void(size_t, uint64_t)>& chunk_done) {
  if (chunk_bytes == 0) {
    return absl::InvalidArgumentError("ReadInParallel: chunk_bytes must be > 0");
  }
  if (fs == nullptr) fs = FileSystem::Default();
  std::vector<Chunk> chunks;
  for (size_t i = 0; i < jobs.size(); ++i) {
    const ReadJob& job = jobs[i];
    for (uint64_t offset = 0; offset < job.bytes; offset += chunk_bytes) {
      chunks.push_back(Chunk{i, offset, std::min(chunk_bytes, job.bytes - offset)});
    }
  }
  // The threads take the chunks in file order: a hint that doubles the kernel's read-ahead
  // for files that are not in the page cache (a cold load from disk).
  std::set<int> sources;
  for (const ReadJob& job : jobs) sources.insert(job.fd);
  for (int fd : sources) (void)::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  const size_t worker_count = std::max<size_t>(
      1, std::min<size_t>(static_cast<size_t>(std::max(threads, 1)), chunks.size()));

  ReadRun run(jobs, std::move(chunks), progress, cancelled, chunk_done, fs);
  std::vector<std::thread> workers;
  workers.reserve(worker_count - 1);
  for (size_t i = 1; i < worker_count; ++i) {
    try {
      workers.emplace_back([&run] { run.Work(); });
    } catch (const std::system_error&) {
      break;  // Out of threads: the ones we have (at least this one) still finish the job.
    }
  }
  run.Work();
  for (std::thread& worker : workers) {
    worker.join();
  }

  absl::Status status = run.result();
  if (status.ok() && progress) {
    progress(run.bytes_done());
  }
  return status;
}

}  // namespace ddo
