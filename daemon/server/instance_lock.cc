#include "daemon/server/instance_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "daemon/common/posix_error.h"

namespace ddo {

pid_t ReadLockOwner(const std::string& lock_path) {
  UniqueFd fd(::open(lock_path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) {
    return -1;
  }
  char buffer[32] = {};
  const ssize_t n = ::read(fd.get(), buffer, sizeof(buffer) - 1);
  int pid = -1;
  if (n <= 0 || !absl::SimpleAtoi(absl::string_view(buffer, static_cast<size_t>(n)), &pid)) {
    return -1;
  }
  return pid;
}

absl::StatusOr<InstanceLock> InstanceLock::Acquire(const std::string& socket_path) {
  std::string lock_path = socket_path + ".lock";
  UniqueFd fd(::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  if (!fd.valid()) {
    return PosixError(absl::StrCat("open ", lock_path), errno);
  }
  if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK) {
      return PosixError(absl::StrCat("flock ", lock_path), errno);
    }
    const pid_t owner = ReadLockOwner(lock_path);
    return absl::AlreadyExistsError(absl::StrCat(
        "another ddod is already serving ", socket_path,
        owner > 0 ? absl::StrCat(" (pid ", owner, ")") : std::string(" (pid unknown)"),
        "; stop it first (ddoctl status shows it) or choose another --socket"));
  }
  // We hold the lock: record our pid for the next one who asks.
  const std::string pid_text = absl::StrCat(::getpid(), "\n");
  if (::ftruncate(fd.get(), 0) != 0 ||
      ::pwrite(fd.get(), pid_text.data(), pid_text.size(), 0) !=
          static_cast<ssize_t>(pid_text.size())) {
    return PosixError(absl::StrCat("write ", lock_path), errno);
  }
  return InstanceLock(std::move(lock_path), std::move(fd));
}

void InstanceLock::Release() {
  if (!fd_.valid()) {
    return;
  }
  // Unlink while still holding the lock so that no newcomer locks a file we then delete.
  ::unlink(lock_path_.c_str());
  fd_.Reset();
}

InstanceLock::~InstanceLock() { Release(); }

}  // namespace ddo
