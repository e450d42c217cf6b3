// File: daemon/server/stop_waiter.h
//
// Waits for the reason ddod should stop: SIGTERM or SIGINT, the death of the parent process
// in embedded mode (--parent-pid), or a request from inside the process; or for SIGHUP, which
// asks ddod to read its configuration again (Wait() returns kReload, and is called again). Signals are taken
// synchronously through a signalfd, so no work ever runs inside a signal handler; parent death
// is watched through the platform layer's ProcessWatch (ddo/os/process_watch.h: a pidfd polled
// beside the signalfd, or a look every 200 ms on kernels without pidfd_open).
//
// BlockTerminationSignals() must run in main() before any thread starts, so that every thread
// inherits the blocked mask and the signals stay pending for the signalfd.
//
// Thread-safety: Wait() is called by one thread; RequestStop() may be called from any thread.
#ifndef DDO_DAEMON_SERVER_STOP_WAITER_H_
#define DDO_DAEMON_SERVER_STOP_WAITER_H_

#include <sys/types.h>

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "ddo/os/process_watch.h"
#include "ddo/wire/unique_fd.h"

namespace ddo {

// Blocks SIGTERM, SIGINT and SIGHUP in the calling thread (and the threads it creates later).
absl::Status BlockTerminationSignals();

struct StopReason {
  enum class Kind { kSignal, kParentExited, kRequested, kReload };
  Kind kind;
  std::string description;  // "SIGTERM", "parent process 1234 exited", ...
};

class StopWaiter {
 public:
  // `parent_pid`: stop when this process ends. Fails with NotFound when it is already gone.
  static absl::StatusOr<StopWaiter> Create(std::optional<pid_t> parent_pid);

  StopWaiter(StopWaiter&&) = default;
  StopWaiter& operator=(StopWaiter&&) = default;

  // Blocks until a stop reason, or a SIGHUP (kReload), arrives.
  StopReason Wait();

  // Makes Wait() return kRequested. Async-signal-safe (a write to an eventfd).
  void RequestStop() const;

 private:
  StopWaiter() = default;

  UniqueFd signal_fd_;
  UniqueFd event_fd_;
  std::optional<os::ProcessWatch> parent_;
};

}  // namespace ddo

#endif  // DDO_DAEMON_SERVER_STOP_WAITER_H_
