#include "ddo/os/process_watch.h"

#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace ddo::os {
namespace {

// How often the fallback (no pidfd_open) looks again.
constexpr absl::Duration kFallbackPollInterval = absl::Milliseconds(200);

// kill(pid, 0) succeeds for a zombie too: a process that has exited and was not reaped yet
// counts as running here (its parent reaps it).
bool Running(ProcessId pid) {
  return ::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM;
}

int PollMilliseconds(absl::Duration timeout) {
  if (timeout == absl::InfiniteDuration()) return -1;
  return static_cast<int>(std::min<int64_t>(absl::ToInt64Milliseconds(absl::Ceil(
                                                timeout, absl::Milliseconds(1))),
                                            1 << 30));
}

}  // namespace

absl::StatusOr<ProcessWatch> ProcessWatch::Open(ProcessId pid) {
  if (pid <= 0) return absl::InvalidArgumentError(absl::StrCat("no process has pid ", pid));
  NativeHandle pidfd;
#ifdef SYS_pidfd_open
  const long fd = ::syscall(SYS_pidfd_open, static_cast<pid_t>(pid), 0);
  if (fd >= 0) {
    pidfd = NativeHandle(static_cast<int>(fd));
  } else if (errno == ESRCH) {
    return absl::NotFoundError(absl::StrCat("process ", pid, " is not running"));
  }
  // Any other failure (ENOSYS on an old kernel, EPERM from a container's seccomp profile that
  // predates the call) leaves the polling below.
#endif
  if (!pidfd.valid() && !Running(pid)) {
    return absl::NotFoundError(absl::StrCat("process ", pid, " is not running"));
  }
  return ProcessWatch(pid, std::move(pidfd));
}

bool ProcessWatch::WaitForExit(absl::Duration timeout) const {
  if (handle_.valid()) {
    const absl::Time deadline = absl::Now() + timeout;
    for (;;) {
      pollfd fd{handle_.get(), POLLIN, 0};
      const int ready = ::poll(&fd, 1, PollMilliseconds(std::max(
                                          deadline - absl::Now(), absl::ZeroDuration())));
      if (ready > 0) return true;  // readable once the process has exited
      if (ready == 0) return false;
      if (errno != EINTR) return false;
    }
  }
  const absl::Time deadline = absl::Now() + timeout;
  while (Running(pid_)) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) return false;
    absl::SleepFor(std::min(left, kFallbackPollInterval));
  }
  return true;
}

ProcessId CurrentProcessId() { return ::getpid(); }

}  // namespace ddo::os
