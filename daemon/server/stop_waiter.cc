#include "daemon/server/stop_waiter.h"

#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "ddo/wire/posix_error.h"

namespace ddo {
namespace {

sigset_t TerminationSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGHUP);
  return set;
}

std::string SignalName(int signal_number) {
  const char* abbreviation = sigabbrev_np(signal_number);
  return abbreviation != nullptr ? absl::StrCat("SIG", abbreviation)
                                 : absl::StrCat("signal ", signal_number);
}

// Polling interval when the kernel has no pidfd_open.
constexpr int kParentPollMs = 200;

}  // namespace

absl::Status BlockTerminationSignals() {
  sigset_t set = TerminationSignals();
  if (int error = pthread_sigmask(SIG_BLOCK, &set, nullptr); error != 0) {
    return PosixError("pthread_sigmask", error);
  }
  return absl::OkStatus();
}

absl::StatusOr<StopWaiter> StopWaiter::Create(std::optional<pid_t> parent_pid) {
  StopWaiter waiter;
  sigset_t set = TerminationSignals();
  waiter.signal_fd_ = UniqueFd(::signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK));
  if (!waiter.signal_fd_.valid()) {
    return PosixError("signalfd", errno);
  }
  waiter.event_fd_ = UniqueFd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!waiter.event_fd_.valid()) {
    return PosixError("eventfd", errno);
  }
  if (parent_pid.has_value()) {
    absl::StatusOr<os::ProcessWatch> parent = os::ProcessWatch::Open(*parent_pid);
    if (absl::IsNotFound(parent.status())) {
      return absl::NotFoundError(
          absl::StrCat("parent process ", *parent_pid, " (--parent-pid) is not running"));
    }
    if (!parent.ok()) return parent.status();
    waiter.parent_.emplace(*std::move(parent));
  }
  return waiter;
}

StopReason StopWaiter::Wait() {
  for (;;) {
    pollfd fds[3] = {{signal_fd_.get(), POLLIN, 0}, {event_fd_.get(), POLLIN, 0}, {-1, 0, 0}};
    nfds_t count = 2;
    if (parent_.has_value() && parent_->pollable().valid()) {
      fds[count++] = {parent_->pollable().get(), POLLIN, 0};
    }
    const int timeout =
        (parent_.has_value() && !parent_->pollable().valid()) ? kParentPollMs : -1;
    const int ready = ::poll(fds, count, timeout);
    if (ready < 0 && errno != EINTR) {
      return {StopReason::Kind::kRequested,
              absl::StrCat("poll failed: ", std::strerror(errno))};
    }
    if (fds[0].revents & POLLIN) {
      signalfd_siginfo info{};
      if (::read(signal_fd_.get(), &info, sizeof(info)) == sizeof(info)) {
        const int number = static_cast<int>(info.ssi_signo);
        return {number == SIGHUP ? StopReason::Kind::kReload : StopReason::Kind::kSignal,
                SignalName(number)};
      }
    }
    if (fds[1].revents & POLLIN) {
      return {StopReason::Kind::kRequested, "stop requested"};
    }
    if (parent_.has_value() && parent_->Exited()) {
      return {StopReason::Kind::kParentExited,
              absl::StrCat("parent process ", parent_->pid(), " exited")};
    }
  }
}

void StopWaiter::RequestStop() const {
  const uint64_t one = 1;
  // Nothing useful to do if this fails: the counter is already non-zero then.
  [[maybe_unused]] ssize_t ignored = ::write(event_fd_.get(), &one, sizeof(one));
}

}  // namespace ddo
