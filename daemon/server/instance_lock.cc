#include "daemon/server/instance_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "daemon/common/status_macros.h"
#include "ddo/wire/posix_error.h"

namespace ddo {
namespace {

constexpr int kOpenFlags = O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC;

pid_t ReadOwner(int fd) {
  char buffer[32] = {};
  const ssize_t n = ::pread(fd, buffer, sizeof(buffer) - 1, 0);
  int pid = -1;
  if (n <= 0 || !absl::SimpleAtoi(absl::string_view(buffer, static_cast<size_t>(n)), &pid)) {
    return -1;
  }
  return pid;
}

// The lock file in `directory`: made now (O_EXCL), or the one an earlier ddod left, which
// must be a regular file of ddod's user with one link (a hard link to someone's file would
// otherwise be written). O_NOFOLLOW: a symbolic link under the name is never followed.
absl::StatusOr<UniqueFd> OpenLockFile(int directory, const std::string& name,
                                      const std::string& lock_path) {
  UniqueFd fd(::openat(directory, name.c_str(), kOpenFlags | O_CREAT | O_EXCL, 0600));
  if (fd.valid()) return fd;
  if (errno != EEXIST) return PosixError(absl::StrCat("create ", lock_path), errno);
  fd.Reset(::openat(directory, name.c_str(), kOpenFlags));
  struct stat info {};
  if (!fd.valid()) {
    // ELOOP: a symbolic link under the name, described below; anything else is an error.
    const int open_errno = errno;
    if (open_errno != ELOOP ||
        ::fstatat(directory, name.c_str(), &info, AT_SYMLINK_NOFOLLOW) != 0) {
      return PosixError(absl::StrCat("open ", lock_path), open_errno);
    }
  } else if (::fstat(fd.get(), &info) != 0) {
    return PosixError(absl::StrCat("stat ", lock_path), errno);
  }
  if (!fd.valid() || !S_ISREG(info.st_mode) || info.st_uid != ::geteuid() ||
      info.st_nlink != 1) {
    const char* kind = S_ISLNK(info.st_mode)   ? "a symbolic link"
                       : S_ISREG(info.st_mode) ? "a regular file"
                                               : "not a regular file";
    return absl::PermissionDeniedError(absl::StrFormat(
        "refusing the lock file %s: it is %s owned by uid %d with %d link(s), not a lock file "
        "of this user (uid %d); someone else may have put it there. Remove it and start again",
        lock_path, kind, info.st_uid, info.st_nlink, ::geteuid()));
  }
  return fd;
}

}  // namespace

pid_t ReadLockOwner(const std::string& lock_path) {
  UniqueFd fd(::open(lock_path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  return fd.valid() ? ReadOwner(fd.get()) : -1;
}

absl::StatusOr<InstanceLock> InstanceLock::Acquire(const std::string& socket_path) {
  DDO_ASSIGN_OR_RETURN(PrivateDirectory directory,
                       PrivateDirectory::Open(ParentDirectory(socket_path)));
  return Acquire(directory, socket_path);
}

absl::StatusOr<InstanceLock> InstanceLock::Acquire(const PrivateDirectory& directory,
                                                   const std::string& socket_path) {
  std::string lock_path = socket_path + ".lock";
  const std::string name = LastComponent(lock_path);
  UniqueFd directory_fd(::fcntl(directory.fd(), F_DUPFD_CLOEXEC, 0));
  if (!directory_fd.valid()) return PosixError(absl::StrCat("dup ", directory.path()), errno);
  DDO_ASSIGN_OR_RETURN(UniqueFd fd, OpenLockFile(directory_fd.get(), name, lock_path));
  if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK) {
      return PosixError(absl::StrCat("flock ", lock_path), errno);
    }
    const pid_t owner = ReadOwner(fd.get());
    return absl::AlreadyExistsError(absl::StrCat(
        "another ddod is already serving ", socket_path,
        owner > 0 ? absl::StrCat(" (pid ", owner, ")") : std::string(" (pid unknown)"),
        "; stop it first (ddoctl status shows it) or choose another --socket"));
  }
  // We hold the lock of our own file: record our pid for the next one who asks.
  const std::string pid_text = absl::StrCat(::getpid(), "\n");
  if (::ftruncate(fd.get(), 0) != 0 ||
      ::pwrite(fd.get(), pid_text.data(), pid_text.size(), 0) !=
          static_cast<ssize_t>(pid_text.size())) {
    return PosixError(absl::StrCat("write ", lock_path), errno);
  }
  return InstanceLock(std::move(lock_path), std::move(directory_fd), std::move(fd));
}

void InstanceLock::Release() {
  if (!fd_.valid()) {
    return;
  }
  // Unlink while still holding the lock so that no newcomer locks a file we then delete.
  ::unlinkat(directory_.get(), LastComponent(lock_path_).c_str(), 0);
  fd_.Reset();
  directory_.Reset();
}

InstanceLock::~InstanceLock() { Release(); }

}  // namespace ddo
