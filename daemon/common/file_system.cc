#include "daemon/common/file_system.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/common/status_macros.h"
#include "ddo/wire/posix_error.h"

namespace ddo {
namespace {

// The granularity at which several threads share the population of a segment (2 MiB: the
// pool's segment granularity).
constexpr uint64_t kPopulateChunk = 2ull << 20;
// What one MADV_POPULATE_WRITE call of a worker covers at most (a progress step).
constexpr uint64_t kPopulateStep = 256ull << 20;

absl::Status NoRoom(uint64_t size, absl::string_view name, int error_number) {
  return absl::ResourceExhaustedError(absl::StrCat(
      "/dev/shm has no room for ", size, " more bytes (allocate ", name, ": ",
      std::strerror(error_number), "; see df /dev/shm; the pool budget is larger than the tmpfs)"));
}

size_t Index(FileOp op) { return static_cast<size_t>(op); }

}  // namespace

FileSystem* FileSystem::Default() {
  static FileSystem* const file_system = new PosixFileSystem();
  return file_system;
}

absl::StatusOr<UniqueFd> PosixFileSystem::ShmOpen(const std::string& name, int flags,
                                                  mode_t mode) {
  UniqueFd fd(::shm_open(name.c_str(), flags, mode));
  if (!fd.valid()) {
    return PosixError(absl::StrCat("shm_open ", name), errno);
  }
  return fd;
}

absl::Status PosixFileSystem::ShmUnlink(const std::string& name) {
  if (::shm_unlink(name.c_str()) != 0) {
    return PosixError(absl::StrCat("shm_unlink ", name), errno);
  }
  return absl::OkStatus();
}

absl::StatusOr<UniqueFd> PosixFileSystem::Open(const std::string& path, int flags, mode_t mode) {
  UniqueFd fd;
  do {
    fd.Reset(::open(path.c_str(), flags, mode));
  } while (!fd.valid() && errno == EINTR);
  if (!fd.valid()) {
    return PosixError(absl::StrCat("open ", path), errno);
  }
  return fd;
}

absl::Status PosixFileSystem::Truncate(int fd, uint64_t size, absl::string_view name) {
  int result;
  do {
    result = ::ftruncate(fd, static_cast<off_t>(size));
  } while (result != 0 && errno == EINTR);
  if (result != 0) {
    return PosixError(absl::StrCat("size ", name, " to ", size, " bytes"), errno);
  }
  return absl::OkStatus();
}

// MADV_POPULATE_WRITE (Linux 5.14) allocates from several threads at once and reports a full
// tmpfs as an error instead of a SIGBUS; older kernels get one posix_fallocate, which does the
// same in one thread. Measured on the GPU machine (docs/benchmarks.md): faster than
// posix_fallocate followed by mapping.
absl::Status PosixFileSystem::Allocate(int fd, char* data, uint64_t size, int threads,
                                       absl::string_view name, WorkProgress* progress) {
  std::atomic<int> first_error{0};
  std::atomic<bool> cancelled{false};
  const uint64_t chunks = std::max<uint64_t>(1, size / kPopulateChunk);
  threads = static_cast<int>(std::clamp<uint64_t>(threads, 1, chunks));
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      const uint64_t first = chunks * t / threads * kPopulateChunk;
      const uint64_t last = std::min(size, chunks * (t + 1) / threads * kPopulateChunk);
      // In steps, so that the reporter sees the bytes arrive and a cancel stops the work.
      for (uint64_t begin = first; begin < last; begin += kPopulateStep) {
        if (progress != nullptr && progress->cancelled()) {
          cancelled.store(true);
          return;
        }
        const uint64_t bytes = std::min(kPopulateStep, last - begin);
        if (::madvise(data + begin, bytes, MADV_POPULATE_WRITE) != 0) {
          int expected = 0;
          first_error.compare_exchange_strong(expected, errno);
          return;
        }
        if (progress != nullptr) progress->Add(bytes);
      }
    });
  }
  for (auto& worker : workers) worker.join();
  int error = first_error.load();
  if (error == EINVAL) {  // a kernel without MADV_POPULATE_WRITE
    error = ::posix_fallocate(fd, 0, static_cast<off_t>(size));
    if (error == 0 && progress != nullptr) progress->Add(size - progress->done());
  }
  if (error == EFAULT || error == ENOMEM || error == ENOSPC) {
    return NoRoom(size, name, error);
  }
  if (error != 0) {
    return PosixError(absl::StrCat("allocate ", size, " bytes of shared memory for ", name),
                      error);
  }
  if (cancelled.load()) {
    return absl::CancelledError(absl::StrCat("the allocation of ", name, " was cancelled"));
  }
  return absl::OkStatus();
}

// One thread: tmpfs takes the file's lock for each fallocate(2), so more would only queue.
absl::Status PosixFileSystem::ReserveSpace(int fd, uint64_t size, absl::string_view name,
                                           WorkProgress* progress) {
  for (uint64_t begin = 0; begin < size; begin += kPopulateStep) {
    if (progress != nullptr && progress->cancelled()) {
      return absl::CancelledError(absl::StrCat("the allocation of ", name, " was cancelled"));
    }
    const uint64_t bytes = std::min(kPopulateStep, size - begin);
    int error;
    do {
      error = ::fallocate(fd, 0, static_cast<off_t>(begin), static_cast<off_t>(bytes)) == 0
                  ? 0
                  : errno;
    } while (error == EINTR);
    if (error == EOPNOTSUPP) {
      return absl::UnimplementedError(absl::StrCat("fallocate of ", name, " is not supported"));
    }
    if (error == ENOSPC || error == ENOMEM) return NoRoom(size, name, error);
    if (error != 0) {
      return PosixError(absl::StrCat("allocate ", size, " bytes of shared memory for ", name),
                        error);
    }
    if (progress != nullptr) progress->Add(bytes);
  }
  return absl::OkStatus();
}

absl::StatusOr<struct stat> PosixFileSystem::Stat(int fd, absl::string_view name) {
  struct stat info {};
  if (::fstat(fd, &info) != 0) {
    return PosixError(absl::StrCat("fstat ", name), errno);
  }
  return info;
}

absl::StatusOr<char*> PosixFileSystem::Map(int fd, uint64_t size, absl::string_view name) {
  void* data = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (data == MAP_FAILED) {
    return PosixError(absl::StrCat("mmap ", name, " (", size, " bytes)"), errno);
  }
  return static_cast<char*>(data);
}

void PosixFileSystem::Unmap(char* data, uint64_t size) { ::munmap(data, size); }

absl::StatusOr<size_t> PosixFileSystem::Read(int fd, uint64_t offset, char* destination,
                                             size_t bytes, absl::string_view name) {
  while (true) {
    const ssize_t got = ::pread(fd, destination, bytes, static_cast<off_t>(offset));
    if (got >= 0) return static_cast<size_t>(got);
    if (errno != EINTR) {
      return PosixError(absl::StrCat("read ", name, " at offset ", offset), errno);
    }
  }
}

absl::StatusOr<size_t> PosixFileSystem::CopyRange(int from, int to, uint64_t offset,
                                                  size_t bytes, absl::string_view name) {
  auto copy_error = [&](int error) {
    if (error == ENOSPC) {
      return absl::ResourceExhaustedError(
          absl::StrCat("no room to copy ", name, " at offset ", offset, ": ",
                       std::strerror(error)));
    }
    return PosixError(absl::StrCat("copy ", name, " at offset ", offset), error);
  };
  while (true) {
    loff_t in = static_cast<loff_t>(offset);
    loff_t out = static_cast<loff_t>(offset);
    const ssize_t got = ::copy_file_range(from, &in, to, &out, bytes, 0);
    if (got >= 0) return static_cast<size_t>(got);
    if (errno == EINTR) continue;
    if (errno != EXDEV && errno != EINVAL && errno != ENOSYS && errno != EOPNOTSUPP) {
      return copy_error(errno);
    }
    break;  // a kernel or file system that cannot: through a buffer
  }
  std::vector<char> buffer(std::min<size_t>(bytes, size_t{1} << 20));
  DDO_ASSIGN_OR_RETURN(size_t got, Read(from, offset, buffer.data(), buffer.size(), name));
  for (size_t written = 0; written < got;) {
    const ssize_t n = ::pwrite(to, buffer.data() + written, got - written,
                               static_cast<off_t>(offset + written));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return copy_error(n < 0 ? errno : EIO);
    written += static_cast<size_t>(n);
  }
  return got;
}

absl::Status PosixFileSystem::Write(int fd, const char* data, size_t bytes,
                                    absl::string_view name) {
  for (size_t written = 0; written < bytes;) {
    const ssize_t n = ::write(fd, data + written, bytes - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return PosixError(absl::StrCat("write ", name), n < 0 ? errno : EIO);
    written += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::Status PosixFileSystem::WriteAt(int fd, uint64_t offset, const char* data, size_t bytes,
                                      absl::string_view name) {
  for (size_t written = 0; written < bytes;) {
    const ssize_t n =
        ::pwrite(fd, data + written, bytes - written, static_cast<off_t>(offset + written));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == ENOSPC || errno == ENOMEM)) return NoRoom(bytes, name, errno);
    if (n <= 0) return PosixError(absl::StrCat("write ", name), n < 0 ? errno : EIO);
    written += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::Status PosixFileSystem::Sync(int fd, absl::string_view name) {
  if (::fsync(fd) != 0) {
    return PosixError(absl::StrCat("fsync ", name), errno);
  }
  return absl::OkStatus();
}

absl::Status PosixFileSystem::Rename(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) {
    return PosixError(absl::StrCat("rename ", from, " to ", to), errno);
  }
  return absl::OkStatus();
}

absl::Status PosixFileSystem::Unlink(const std::string& path) {
  if (::unlink(path.c_str()) != 0) {
    return PosixError(absl::StrCat("unlink ", path), errno);
  }
  return absl::OkStatus();
}

// ---- FaultInjectingFileSystem ----------------------------------------------------------------

void FaultInjectingFileSystem::FailNth(FileOp op, int error_number, int nth) {
  absl::MutexLock lock(&mu_);
  faults_[Index(op)] = Fault{error_number, std::max(nth, 1), false};
}

void FaultInjectingFileSystem::FailAlways(FileOp op, int error_number) {
  absl::MutexLock lock(&mu_);
  faults_[Index(op)] = Fault{error_number, 1, true};
}

void FaultInjectingFileSystem::TruncateReadsAt(uint64_t size) {
  absl::MutexLock lock(&mu_);
  read_limit_ = size;
}

void FaultInjectingFileSystem::Heal() {
  absl::MutexLock lock(&mu_);
  faults_ = {};
  read_limit_ = UINT64_MAX;
}

int FaultInjectingFileSystem::Calls(FileOp op) const {
  absl::MutexLock lock(&mu_);
  return calls_[Index(op)];
}

int FaultInjectingFileSystem::Enter(FileOp op) {
  absl::MutexLock lock(&mu_);
  ++calls_[Index(op)];
  Fault& fault = faults_[Index(op)];
  if (fault.countdown == 0) return 0;
  if (fault.always) return fault.error_number;
  if (--fault.countdown > 0) return 0;
  const int error_number = fault.error_number;
  fault = Fault{};
  return error_number;
}

absl::StatusOr<UniqueFd> FaultInjectingFileSystem::ShmOpen(const std::string& name, int flags,
                                                           mode_t mode) {
  if (int error = Enter(FileOp::kShmOpen)) {
    return PosixError(absl::StrCat("shm_open ", name), error);
  }
  return base_->ShmOpen(name, flags, mode);
}

absl::Status FaultInjectingFileSystem::ShmUnlink(const std::string& name) {
  if (int error = Enter(FileOp::kShmUnlink)) {
    return PosixError(absl::StrCat("shm_unlink ", name), error);
  }
  return base_->ShmUnlink(name);
}

absl::StatusOr<UniqueFd> FaultInjectingFileSystem::Open(const std::string& path, int flags,
                                                        mode_t mode) {
  if (int error = Enter(FileOp::kOpen)) return PosixError(absl::StrCat("open ", path), error);
  return base_->Open(path, flags, mode);
}

absl::Status FaultInjectingFileSystem::Truncate(int fd, uint64_t size, absl::string_view name) {
  if (int error = Enter(FileOp::kTruncate)) {
    return PosixError(absl::StrCat("size ", name, " to ", size, " bytes"), error);
  }
  return base_->Truncate(fd, size, name);
}

absl::Status FaultInjectingFileSystem::Allocate(int fd, char* data, uint64_t size, int threads,
                                                absl::string_view name, WorkProgress* progress) {
  if (int error = Enter(FileOp::kAllocate)) {
    if (error == ENOSPC || error == ENOMEM) return NoRoom(size, name, error);
    return PosixError(absl::StrCat("allocate ", size, " bytes of shared memory for ", name),
                      error);
  }
  return base_->Allocate(fd, data, size, threads, name, progress);
}

absl::StatusOr<struct stat> FaultInjectingFileSystem::Stat(int fd, absl::string_view name) {
  if (int error = Enter(FileOp::kStat)) return PosixError(absl::StrCat("fstat ", name), error);
  return base_->Stat(fd, name);
}

absl::StatusOr<char*> FaultInjectingFileSystem::Map(int fd, uint64_t size,
                                                    absl::string_view name) {
  if (int error = Enter(FileOp::kMap)) {
    return PosixError(absl::StrCat("mmap ", name, " (", size, " bytes)"), error);
  }
  return base_->Map(fd, size, name);
}

void FaultInjectingFileSystem::Unmap(char* data, uint64_t size) { base_->Unmap(data, size); }

size_t FaultInjectingFileSystem::ClampToReadLimit(uint64_t offset, size_t bytes) const {
  absl::MutexLock lock(&mu_);
  if (offset >= read_limit_) return 0;
  return static_cast<size_t>(std::min<uint64_t>(bytes, read_limit_ - offset));
}

absl::StatusOr<size_t> FaultInjectingFileSystem::Read(int fd, uint64_t offset, char* destination,
                                                      size_t bytes, absl::string_view name) {
  if (int error = Enter(FileOp::kRead)) {
    return PosixError(absl::StrCat("read ", name, " at offset ", offset), error);
  }
  bytes = ClampToReadLimit(offset, bytes);
  if (bytes == 0) return 0;
  return base_->Read(fd, offset, destination, bytes, name);
}

absl::StatusOr<size_t> FaultInjectingFileSystem::CopyRange(int from, int to, uint64_t offset,
                                                           size_t bytes, absl::string_view name) {
  // A copy reads: the faults and the short end of kRead apply.
  if (int error = Enter(FileOp::kRead)) {
    return PosixError(absl::StrCat("copy ", name, " at offset ", offset), error);
  }
  bytes = ClampToReadLimit(offset, bytes);
  if (bytes == 0) return 0;
  return base_->CopyRange(from, to, offset, bytes, name);
}

absl::Status FaultInjectingFileSystem::Write(int fd, const char* data, size_t bytes,
                                             absl::string_view name) {
  if (int error = Enter(FileOp::kWrite)) return PosixError(absl::StrCat("write ", name), error);
  return base_->Write(fd, data, bytes, name);
}

absl::Status FaultInjectingFileSystem::WriteAt(int fd, uint64_t offset, const char* data,
                                               size_t bytes, absl::string_view name) {
  if (int error = Enter(FileOp::kWrite)) {
    if (error == ENOSPC) return NoRoom(bytes, name, error);
    return PosixError(absl::StrCat("write ", name), error);
  }
  return base_->WriteAt(fd, offset, data, bytes, name);
}

absl::Status FaultInjectingFileSystem::ReserveSpace(int fd, uint64_t size,
                                                    absl::string_view name,
                                                    WorkProgress* progress) {
  if (int error = Enter(FileOp::kAllocate)) {
    if (error == ENOSPC || error == ENOMEM) return NoRoom(size, name, error);
    return PosixError(absl::StrCat("allocate ", size, " bytes of shared memory for ", name),
                      error);
  }
  return base_->ReserveSpace(fd, size, name, progress);
}

absl::Status FaultInjectingFileSystem::Sync(int fd, absl::string_view name) {
  if (int error = Enter(FileOp::kSync)) return PosixError(absl::StrCat("fsync ", name), error);
  return base_->Sync(fd, name);
}

absl::Status FaultInjectingFileSystem::Rename(const std::string& from, const std::string& to) {
  if (int error = Enter(FileOp::kRename)) {
    return PosixError(absl::StrCat("rename ", from, " to ", to), error);
  }
  return base_->Rename(from, to);
}

absl::Status FaultInjectingFileSystem::Unlink(const std::string& path) {
  if (int error = Enter(FileOp::kUnlink)) return PosixError(absl::StrCat("unlink ", path), error);
  return base_->Unlink(path);
}

}  // namespace ddo
