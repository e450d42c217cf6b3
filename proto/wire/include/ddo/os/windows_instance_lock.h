// File: proto/wire/include/ddo/os/windows_instance_lock.h
//
// One ddod per socket on Windows (docs/windows.md): what daemon/server/instance_lock does with
// flock(2) on Linux, done with LockFileEx on "<socket>.lock". The lock file is created with the
// owner-only DACL and holds the owner's pid; Windows drops the lock when its process ends,
// however it ends, so a killed daemon's leftover is taken over while a live one is never
// stolen.
//
// Thread-safety: a value one thread owns.
#ifndef DDO_OS_WINDOWS_INSTANCE_LOCK_H_
#define DDO_OS_WINDOWS_INSTANCE_LOCK_H_

#ifdef _WIN32

#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "ddo/os/native_handle.h"

namespace ddo::os {

class WindowsInstanceLock {
 public:
  // Takes the lock for `socket_path`. AlreadyExists naming the socket and the holder's pid
  // when another live process holds it.
  static absl::StatusOr<WindowsInstanceLock> Acquire(const std::string& socket_path);

  WindowsInstanceLock(WindowsInstanceLock&&) noexcept = default;
  WindowsInstanceLock& operator=(WindowsInstanceLock&&) noexcept = default;
  // Releases the lock (closing the file releases it) and deletes the file.
  ~WindowsInstanceLock();

  const std::string& lock_path() const { return lock_path_; }

 private:
  WindowsInstanceLock(std::string lock_path, NativeHandle file)
      : lock_path_(std::move(lock_path)), file_(std::move(file)) {}

  std::string lock_path_;
  NativeHandle file_;
};

}  // namespace ddo::os

#endif  // _WIN32

#endif  // DDO_OS_WINDOWS_INSTANCE_LOCK_H_
