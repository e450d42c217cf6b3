#include "daemon/pool/shared_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/common/posix_error.h"
#include "daemon/common/unique_fd.h"

namespace ddo {
namespace {

absl::StatusOr<char*> MapShared(int fd, uint64_t size, const std::string& name) {
  if (size == 0) {
    return absl::DataLossError(absl::StrCat("shared memory segment ", name, " is empty"));
  }
  void* data = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (data == MAP_FAILED) {
    return PosixError(absl::StrCat("mmap ", name, " (", size, " bytes)"), errno);
  }
  return static_cast<char*>(data);
}

// Allocates and maps every page of the segment. MADV_POPULATE_WRITE (Linux 5.14) does it from
// several threads at once and reports a full tmpfs as an error instead of a SIGBUS; older
// kernels get one posix_fallocate, which does the same in one thread. Measured on the GPU
// machine (docs/benchmarks.md): faster than posix_fallocate followed by mapping.
absl::Status PopulatePages(char* data, uint64_t size, int threads, int fd) {
  std::atomic<int> first_error{0};
  const uint64_t chunks = std::max<uint64_t>(1, size / kSegmentGranularity);
  threads = static_cast<int>(std::clamp<uint64_t>(threads, 1, chunks));
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      const uint64_t first = chunks * t / threads * kSegmentGranularity;
      const uint64_t last = std::min(size, chunks * (t + 1) / threads * kSegmentGranularity);
      if (last > first && ::madvise(data + first, last - first, MADV_POPULATE_WRITE) != 0) {
        int expected = 0;
        first_error.compare_exchange_strong(expected, errno);
      }
    });
  }
  for (auto& worker : workers) worker.join();
  int error = first_error.load();
  if (error == EINVAL) {  // a kernel without MADV_POPULATE_WRITE
    error = ::posix_fallocate(fd, 0, static_cast<off_t>(size));
  }
  if (error == EFAULT || error == ENOMEM || error == ENOSPC) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "/dev/shm has no room for ", size, " more bytes (see df /dev/shm; the pool budget is "
        "larger than the tmpfs)"));
  }
  if (error != 0) {
    return PosixError(absl::StrCat("allocate ", size, " bytes of shared memory"), error);
  }
  return absl::OkStatus();
}

}  // namespace

uint64_t RoundUpToSegmentGranularity(uint64_t bytes) {
  const uint64_t rounded = (bytes + kSegmentGranularity - 1) / kSegmentGranularity;
  return std::max<uint64_t>(rounded, 1) * kSegmentGranularity;
}

std::string SegmentPath(const std::string& name) {
  return absl::StrCat("/dev/shm/", name.substr(name.find_first_not_of('/')));
}

absl::StatusOr<SharedSegment> SharedSegment::Create(const std::string& name, uint64_t size,
                                                    int threads) {
  UniqueFd fd(::shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  if (!fd.valid()) {
    return PosixError(absl::StrCat("shm_open ", name), errno);
  }
  if (::ftruncate(fd.get(), static_cast<off_t>(size)) != 0) {
    const int error = errno;
    ::shm_unlink(name.c_str());
    return PosixError(absl::StrCat("size ", name, " to ", size, " bytes"), error);
  }
  auto data = MapShared(fd.get(), size, name);
  if (!data.ok()) {
    ::shm_unlink(name.c_str());
    return data.status();
  }
  SharedSegment segment(name, *data, size);
  // Huge pages cut the page faults 512-fold where the administrator allows them for shared
  // memory (/sys/kernel/mm/transparent_hugepage/shmem_enabled "advise"); a no-op elsewhere.
  ::madvise(segment.data(), size, MADV_HUGEPAGE);
  // Allocate every page now, so that a full /dev/shm is an error here rather than a SIGBUS
  // later in whoever touches the page first.
  if (absl::Status allocated = PopulatePages(segment.data(), size, threads, fd.get());
      !allocated.ok()) {
    ::shm_unlink(name.c_str());
    return allocated;
  }
  return segment;
}

absl::StatusOr<SharedSegment> SharedSegment::Open(const std::string& name) {
  UniqueFd fd(::shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0));
  if (!fd.valid()) {
    return PosixError(absl::StrCat("shm_open ", name), errno);
  }
  struct stat info {};
  if (::fstat(fd.get(), &info) != 0) {
    return PosixError(absl::StrCat("fstat ", name), errno);
  }
  if (info.st_uid != ::geteuid() || (info.st_mode & 077) != 0) {
    return absl::PermissionDeniedError(
        absl::StrCat(name, " is not an owner-only segment of this user; not adopting it"));
  }
  const uint64_t size = static_cast<uint64_t>(info.st_size);
  auto data = MapShared(fd.get(), size, name);
  if (!data.ok()) {
    return data.status();
  }
  return SharedSegment(name, *data, size);
}

SharedSegment::SharedSegment(SharedSegment&& other) noexcept
    : name_(std::move(other.name_)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)) {}

SharedSegment& SharedSegment::operator=(SharedSegment&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) {
      ::munmap(data_, size_);
    }
    name_ = std::move(other.name_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

SharedSegment::~SharedSegment() {
  if (data_ != nullptr) {
    ::munmap(data_, size_);
  }
}

absl::Status SharedSegment::Unlink() const {
  if (::shm_unlink(name_.c_str()) != 0 && errno != ENOENT) {
    return PosixError(absl::StrCat("shm_unlink ", name_), errno);
  }
  return absl::OkStatus();
}

}  // namespace ddo
