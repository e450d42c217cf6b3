// File: daemon/server/instance_lock.h
//
// One ddod per socket. The lock is an flock(2) on "<socket>.lock" holding the owner's pid:
// the kernel drops it when the owner dies, however it dies, so a stale socket left by a
// killed daemon is recognised (lock free) and replaced, while a live one is never stolen.
//
// The lock file is opened relative to the socket's checked directory (PrivateDirectory) with
// O_NOFOLLOW, and only a regular file of ddod's own user with one link is ever written: a link
// planted under its name never redirects the write to someone else's file (issue 31, finding 7).
//
// Thread-safety: an InstanceLock is owned by one thread; Acquire is safe from any thread.
#ifndef DDO_DAEMON_SERVER_INSTANCE_LOCK_H_
#define DDO_DAEMON_SERVER_INSTANCE_LOCK_H_

#include <sys/types.h>

#include <string>

#include "absl/status/statusor.h"
#include "daemon/common/runtime_dir.h"
#include "ddo/wire/unique_fd.h"

namespace ddo {

class InstanceLock {
 public:
  // Takes the lock for `socket_path`, whose directory is `directory`. When another live
  // process holds it, returns AlreadyExists with a message naming the socket and that
  // process's pid; PERMISSION_DENIED when something else than ddod's lock file is there.
  static absl::StatusOr<InstanceLock> Acquire(const PrivateDirectory& directory,
                                              const std::string& socket_path);
  // The same, opening (and checking) the socket's directory first.
  static absl::StatusOr<InstanceLock> Acquire(const std::string& socket_path);

  InstanceLock(InstanceLock&&) = default;
  InstanceLock& operator=(InstanceLock&&) = default;
  ~InstanceLock();

  // Removes the lock file and releases the lock (also done by the destructor).
  void Release();

  const std::string& lock_path() const { return lock_path_; }

 private:
  InstanceLock(std::string lock_path, UniqueFd directory, UniqueFd fd)
      : lock_path_(std::move(lock_path)), directory_(std::move(directory)), fd_(std::move(fd)) {}

  std::string lock_path_;
  UniqueFd directory_;  // the socket's directory: the file is unlinked relative to it
  UniqueFd fd_;
};

// The pid recorded in a lock file (not followed when a link), or -1 when unreadable.
pid_t ReadLockOwner(const std::string& lock_path);

}  // namespace ddo

#endif  // DDO_DAEMON_SERVER_INSTANCE_LOCK_H_
