// File: proto/wire/include/ddo/os/process_watch.h
//
// ProcessWatch: learns when another process ends, without a thread per process and without
// being fooled by a recycled pid once the watch is open.
//
//   POSIX:   a pidfd (pidfd_open, Linux 5.3+): readable once the process has exited, which
//            poll() can wait on beside other descriptors (pollable()); where pidfd_open fails
//            (an old kernel, a container's seccomp profile that predates it), kill(pid, 0)
//            every 200 ms (a pid reused after the process ended is then taken for it).
//   Windows: OpenProcess(SYNCHRONIZE | PROCESS_QUERY_LIMITED_INFORMATION): the handle is
//            signalled when the process ends, and WaitForMultipleObjects can wait on it.
//
// Thread-safety: const methods may be called from any thread.
#ifndef DDO_OS_PROCESS_WATCH_H_
#define DDO_OS_PROCESS_WATCH_H_

#include <cstdint>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "ddo/os/native_handle.h"

namespace ddo::os {

// A process id on either system (pid_t, DWORD).
using ProcessId = int64_t;

class ProcessWatch {
 public:
  // Watches `pid`. NotFound when no such process runs; InvalidArgument for pid <= 0.
  static absl::StatusOr<ProcessWatch> Open(ProcessId pid);

  ProcessWatch(ProcessWatch&&) noexcept = default;
  ProcessWatch& operator=(ProcessWatch&&) noexcept = default;

  // True once the process has ended, waiting at most `timeout` for it (zero: just look).
  bool WaitForExit(absl::Duration timeout) const;
  bool Exited() const { return WaitForExit(absl::ZeroDuration()); }

  ProcessId pid() const { return pid_; }
  // What the system's wait calls can wait on (readable / signalled at the end); not valid()
  // when this system offers none (the POSIX fallback): callers then poll Exited().
  const NativeHandle& pollable() const { return handle_; }

 private:
  ProcessWatch(ProcessId pid, NativeHandle handle) : pid_(pid), handle_(std::move(handle)) {}

  ProcessId pid_ = 0;
  NativeHandle handle_;
};

// This process's id.
ProcessId CurrentProcessId();

}  // namespace ddo::os

#endif  // DDO_OS_PROCESS_WATCH_H_
