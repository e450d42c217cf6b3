#include "daemon/pool/shared_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "daemon/common/status_macros.h"
#include "ddo/wire/unique_fd.h"

namespace ddo {
namespace {

absl::StatusOr<char*> MapShared(FileSystem& fs, int fd, uint64_t size, const std::string& name) {
  if (size == 0) {
    return absl::DataLossError(absl::StrCat("shared memory segment ", name, " is empty"));
  }
  return fs.Map(fd, size, name);
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
                                                    int threads, FileSystem* fs,
                                                    WorkProgress* progress, SegmentPages pages) {
  if (fs == nullptr) fs = FileSystem::Default();
  DDO_ASSIGN_OR_RETURN(UniqueFd fd,
                       fs->ShmOpen(name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  // From here on, a failure removes the name again: nothing half-made stays in /dev/shm.
  auto remove = absl::MakeCleanup([&] { (void)fs->ShmUnlink(name); });
  DDO_RETURN_IF_ERROR(fs->Truncate(fd.get(), size, name));
  DDO_ASSIGN_OR_RETURN(char* data, MapShared(*fs, fd.get(), size, name));
  SharedSegment segment(fs, name, data, size);
  // Huge pages cut the page faults 512-fold where the administrator allows them for shared
  // memory (/sys/kernel/mm/transparent_hugepage/shmem_enabled "advise"); a no-op elsewhere.
  ::madvise(segment.data(), size, MADV_HUGEPAGE);
  // Allocate every page now, so that a full /dev/shm is an error here rather than a SIGBUS
  // later in whoever touches the page first.
  if (pages == SegmentPages::kReserved) {
    absl::Status reserved = fs->ReserveSpace(fd.get(), size, name, progress);
    // A file system without fallocate gets its pages populated instead.
    if (absl::IsUnimplemented(reserved)) {
      pages = SegmentPages::kPopulated;
    } else {
      DDO_RETURN_IF_ERROR(reserved);
    }
  }
  if (pages == SegmentPages::kPopulated) {
    DDO_RETURN_IF_ERROR(fs->Allocate(fd.get(), segment.data(), size, threads, name, progress));
  }
  std::move(remove).Cancel();
  return segment;
}

absl::StatusOr<SharedSegment> SharedSegment::Open(const std::string& name, FileSystem* fs) {
  if (fs == nullptr) fs = FileSystem::Default();
  DDO_ASSIGN_OR_RETURN(UniqueFd fd, fs->ShmOpen(name, O_RDWR | O_CLOEXEC, 0));
  DDO_ASSIGN_OR_RETURN(struct stat info, fs->Stat(fd.get(), name));
  // shm_open never follows a link (glibc adds O_NOFOLLOW); a second name of the file (a hard
  // link planted where a segment of the manifest was) or anything but a file is not ours either.
  if (!S_ISREG(info.st_mode) || info.st_nlink != 1 || info.st_uid != ::geteuid() ||
      (info.st_mode & 077) != 0) {
    return absl::PermissionDeniedError(
        absl::StrCat(name, " is not an owner-only segment of this user; not adopting it"));
  }
  const uint64_t size = static_cast<uint64_t>(info.st_size);
  DDO_ASSIGN_OR_RETURN(char* data, MapShared(*fs, fd.get(), size, name));
  return SharedSegment(fs, name, data, size);
}

SharedSegment::SharedSegment(SharedSegment&& other) noexcept
    : fs_(other.fs_),
      name_(std::move(other.name_)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)) {}

SharedSegment& SharedSegment::operator=(SharedSegment&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) {
      fs_->Unmap(data_, size_);
    }
    fs_ = other.fs_;
    name_ = std::move(other.name_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

SharedSegment::~SharedSegment() {
  if (data_ != nullptr) {
    fs_->Unmap(data_, size_);
  }
}

absl::Status SharedSegment::Shrink(uint64_t size) {
  if (size == 0 || size > size_ || size % kSegmentGranularity != 0) {
    return absl::InvalidArgumentError(absl::StrCat("cannot shrink ", name_, " from ", size_,
                                                   " to ", size, " bytes"));
  }
  if (size == size_) return absl::OkStatus();
  DDO_ASSIGN_OR_RETURN(UniqueFd fd, fs_->ShmOpen(name_, O_RDWR | O_CLOEXEC, 0));
  DDO_RETURN_IF_ERROR(fs_->Truncate(fd.get(), size, name_));
  fs_->Unmap(data_ + size, size_ - size);
  size_ = size;
  return absl::OkStatus();
}

absl::Status SharedSegment::Unlink() const {
  absl::Status unlinked = fs_->ShmUnlink(name_);
  return absl::IsNotFound(unlinked) ? absl::OkStatus() : unlinked;
}

}  // namespace ddo
