#include "ddo/os/shared_memory.h"

#include <fcntl.h>
#include <grp.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

#include "absl/strings/str_cat.h"
#include "../segment_name.h"
#include "ddo/wire/posix_error.h"

namespace ddo::os {
namespace {

std::string PosixName(const std::string& name) { return "/" + name; }

absl::StatusOr<gid_t> GroupId(const std::string& group) {
  std::vector<char> buffer(16384);
  struct group entry {};
  struct group* found = nullptr;
  const int error = ::getgrnam_r(group.c_str(), &entry, buffer.data(), buffer.size(), &found);
  if (error != 0) return PosixError(absl::StrCat("look up group ", group), error);
  if (found == nullptr) return absl::NotFoundError(absl::StrCat("no group named ", group));
  return found->gr_gid;
}

}  // namespace

// The system half of MappedView (mapped_view.cc has the rest).
void MappedView::Reset() {
  if (data_ != nullptr) ::munmap(data_, size_);
  data_ = nullptr;
  size_ = 0;
}

absl::StatusOr<SharedMemory> SharedMemory::Create(const std::string& name, uint64_t bytes,
                                                  const SegmentAccess& access) {
  if (absl::Status valid = CheckNewSegment(name, bytes); !valid.ok()) return valid;
  std::optional<gid_t> group;
  if (access.group.has_value()) {
    absl::StatusOr<gid_t> gid = GroupId(*access.group);
    if (!gid.ok()) return gid.status();
    group = *gid;
  }
  const std::string path = PosixName(name);
  NativeHandle fd(::shm_open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                             S_IRUSR | S_IWUSR));
  if (!fd.valid()) return PosixError(absl::StrCat("create shared memory ", path), errno);
  // Whatever fails from here removes the name again: no half-made segment stays behind.
  auto fail = [&path](absl::Status status) {
    ::shm_unlink(path.c_str());
    return status;
  };
  if (group.has_value()) {
    if (::fchown(fd.get(), static_cast<uid_t>(-1), *group) != 0 ||
        ::fchmod(fd.get(), S_IRUSR | S_IWUSR | S_IRGRP | S_IWGRP) != 0) {
      return fail(PosixError(absl::StrCat("give group ", *access.group, " ", path), errno));
    }
  }
  if (::ftruncate(fd.get(), static_cast<off_t>(bytes)) != 0) {
    return fail(PosixError(absl::StrCat("size ", path), errno));
  }
  return SharedMemory(name, std::move(fd), bytes, /*writable=*/true);
}

absl::StatusOr<SharedMemory> SharedMemory::Open(const std::string& name, bool writable,
                                                bool /*global_namespace*/) {
  if (absl::Status valid = CheckSegmentName(name); !valid.ok()) return valid;
  const std::string path = PosixName(name);
  NativeHandle fd(
      ::shm_open(path.c_str(), (writable ? O_RDWR : O_RDONLY) | O_NOFOLLOW | O_CLOEXEC, 0));
  if (!fd.valid()) return PosixError(absl::StrCat("open shared memory ", path), errno);
  struct stat info {};
  if (::fstat(fd.get(), &info) != 0) return PosixError(absl::StrCat("stat ", path), errno);
  return SharedMemory(name, std::move(fd), static_cast<uint64_t>(info.st_size), writable);
}

absl::Status SharedMemory::Remove(const std::string& name) {
  if (absl::Status valid = CheckSegmentName(name); !valid.ok()) return valid;
  const std::string path = PosixName(name);
  if (::shm_unlink(path.c_str()) != 0) {
    return PosixError(absl::StrCat("remove shared memory ", path), errno);
  }
  return absl::OkStatus();
}

absl::StatusOr<MappedView> SharedMemory::Map(bool writable) const {
  if (writable && !writable_) {
    return absl::FailedPreconditionError(
        absl::StrCat("shared memory ", name_, " was opened read-only"));
  }
  void* data = ::mmap(nullptr, size_, PROT_READ | (writable ? PROT_WRITE : 0), MAP_SHARED,
                      handle_.get(), 0);
  if (data == MAP_FAILED) return PosixError(absl::StrCat("map shared memory ", name_), errno);
  return MappedView(data, size_);
}

}  // namespace ddo::os
