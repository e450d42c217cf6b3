#include "daemon/pool/shared_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

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

}  // namespace

uint64_t RoundUpToSegmentGranularity(uint64_t bytes) {
  const uint64_t rounded = (bytes + kSegmentGranularity - 1) / kSegmentGranularity;
  return std::max<uint64_t>(rounded, 1) * kSegmentGranularity;
}

std::string SegmentPath(const std::string& name) {
  return absl::StrCat("/dev/shm/", name.substr(name.find_first_not_of('/')));
}

absl::StatusOr<SharedSegment> SharedSegment::Create(const std::string& name, uint64_t size) {
  UniqueFd fd(::shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  if (!fd.valid()) {
    return PosixError(absl::StrCat("shm_open ", name), errno);
  }
  // fallocate reserves the pages now, so running out of /dev/shm is an error here rather than
  // a SIGBUS later in whoever touches the page first.
  if (int error = ::posix_fallocate(fd.get(), 0, static_cast<off_t>(size)); error != 0) {
    ::shm_unlink(name.c_str());
    return PosixError(absl::StrCat("reserve ", size, " bytes for ", name, " in /dev/shm"), error);
  }
  auto data = MapShared(fd.get(), size, name);
  if (!data.ok()) {
    ::shm_unlink(name.c_str());
    return data.status();
  }
  return SharedSegment(name, *data, size);
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
