#include "daemon/server/connection_gate.h"

#include <fcntl.h>
#include <grpcpp/server_posix.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "daemon/common/descriptor_reserve.h"
#include "daemon/common/log_throttle.h"
#include "daemon/common/logging.h"
#include "daemon/identity/caller.h"
#include "ddo/wire/posix_error.h"
#include "ddo/wire/seqpacket.h"

namespace ddo {
namespace {

constexpr absl::Duration kFirstBackOff = absl::Milliseconds(10);
constexpr absl::Duration kLongestBackOff = absl::Milliseconds(200);
constexpr absl::Duration kLogInterval = absl::Seconds(10);

bool StillOpen(int fd, ino_t inode) {
  struct stat info {};
  return ::fstat(fd, &info) == 0 && S_ISSOCK(info.st_mode) && info.st_ino == inode;
}

// Milliseconds until `when` for poll: -1 for never, at least 1 otherwise.
int PollTimeout(absl::Time now, absl::Time when) {
  if (when == absl::InfiniteFuture()) return -1;
  const int64_t ms = absl::ToInt64Milliseconds(absl::Ceil(when - now, absl::Milliseconds(1)));
  return static_cast<int>(std::clamp<int64_t>(ms, 1, 60000));
}

// Every TCP peer, as one caller: no uid from the kernel, never an admin (the bucket is bounded
// by the total alone: ConnectionGate::Start gives the TCP gate per_uid = in_all).
PeerCredentials TcpPeer() {
  PeerCredentials peer;
  peer.uid = static_cast<uid_t>(-2);
  peer.gid = static_cast<gid_t>(-2);
  peer.pid = 0;
  return peer;
}

// The next back-off after accept ran out of descriptors: 10 ms doubling to 200 ms.
absl::Duration NextBackOff(absl::Duration back_off) {
  return std::clamp(back_off * 2, kFirstBackOff, kLongestBackOff);
}

// The gate's accept loop, run on its thread: the connection table, the descriptor reserve, the
// log throttles and the back-off live as long as the loop.
// Thread-safety: used by the gate's thread alone.
class AcceptLoop {
 public:
  AcceptLoop(int listener, int wake, const ConnectionGateOptions& options,
             const ConnectionGate::HandOff& hand_off)
      : listener_(listener),
        wake_(wake),
        options_(options),
        hand_off_(hand_off),
        log_(Logger("server")),
        what_(options.what),
        table_(what_, options.limits, StillOpen),
        reserve_(DescriptorReserve::ForThisProcess(options.descriptor_reserve)) {}

  // Returns on Stop(), or when poll fails.
  void Run() {
    while (true) {
      const absl::Time now = absl::Now();
      LogSuppressed(now);
      const bool backing_off = back_off_ > absl::ZeroDuration();
      const Woken woken = Wait(now, backing_off);
      if (woken == Woken::kStop) return;
      if (woken == Woken::kAgain) continue;
      const bool out_of_descriptors = AcceptPending();
      back_off_ = out_of_descriptors ? NextBackOff(back_off_) : absl::ZeroDuration();
    }
  }

 private:
  enum class Woken { kStop, kAgain, kAccept };

  // The counts each throttle held back, once its interval is over.
  void LogSuppressed(absl::Time now) {
    if (const uint64_t held = limit_lines_.TakeSuppressed(now); held > 0) {
      log_->warn("{}: {} more connection(s) refused in the last {}", what_, held,
                 absl::FormatDuration(kLogInterval));
    }
    if (const uint64_t held = reserve_lines_.TakeSuppressed(now); held > 0) {
      log_->warn("{}: {} more connection(s) refused in the last {} to keep the descriptor reserve",
                 what_, held, absl::FormatDuration(kLogInterval));
    }
    if (const uint64_t held = failed_lines_.TakeSuppressed(now); held > 0) {
      log_->warn("{}: accept failed {} more time(s) in the last {}", what_, held,
                 absl::FormatDuration(kLogInterval));
    }
  }

  // Backing off: wait on Stop() alone, then try accept again. Otherwise wait for a
  // connection, or for the moment a suppressed count is due.
  Woken Wait(absl::Time now, bool backing_off) {
    const absl::Time report = std::min(
        {limit_lines_.NextReport(), reserve_lines_.NextReport(), failed_lines_.NextReport()});
    const int timeout = backing_off ? PollTimeout(now, now + back_off_) : PollTimeout(now, report);
    pollfd polled[2] = {{wake_, POLLIN, 0}, {listener_, POLLIN, 0}};
    if (::poll(polled, backing_off ? 1 : 2, timeout) < 0) {
      if (errno == EINTR) return Woken::kAgain;
      log_->error("poll on the {}: {}; no new connections are accepted", what_,
                  std::strerror(errno));
      return Woken::kStop;
    }
    if (polled[0].revents != 0) return Woken::kStop;  // Stop()
    if (!backing_off && polled[1].revents == 0) return Woken::kAgain;  // a report was due
    return Woken::kAccept;
  }

  // Accepts until the backlog is empty; returns whether accept ran out of descriptors.
  bool AcceptPending() {
    while (true) {
      UniqueFd fd(::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
      if (!fd.valid()) {
        const int error = errno;
        if (error == EINTR || error == ECONNABORTED) continue;
        if (error == EAGAIN || error == EWOULDBLOCK) return false;
        // EMFILE, ENFILE, ENOBUFS, ENOMEM: the connection waits in the backlog until
        // descriptors are back; anything else is waited out the same way, quietly.
        if (failed_lines_.Admit(absl::Now(), suppressed_)) {
          log_->warn("accept on the {}: {}; retrying in {}{}", what_, std::strerror(error),
                     absl::FormatDuration(NextBackOff(back_off_)), SuppressedNote(suppressed_));
        }
        return true;
      }
      AdmitOrRefuse(std::move(fd));
    }
  }

  // Hands `fd` to the server, or refuses it: fd closes on return, so the client sees its
  // connection end before any answer.
  void AdmitOrRefuse(UniqueFd fd) {
    LogThrottle* lines = &limit_lines_;
    absl::StatusOr<PeerCredentials> peer =
        options_.tcp ? absl::StatusOr<PeerCredentials>(TcpPeer()) : PeerCredentialsOf(fd.get());
    const std::string refusal = Refusal(fd.get(), peer, &lines);
    if (refusal.empty()) {
      hand_off_(fd.Release());
      return;
    }
    if (lines->Admit(absl::Now(), suppressed_)) {
      log_->warn("refused a connection to the {}{}: {}{}", what_,
                 peer.ok() && !options_.tcp
                     ? absl::StrCat(" of uid ", peer->uid, " pid ", peer->pid) : "",
                 refusal, SuppressedNote(suppressed_));
    }
  }

  // Why `fd` is refused, or "" to admit it; checked in this order: the peer's credentials,
  // fstat, the connection limits (per uid and in all), the descriptor reserve. A reserve
  // refusal releases the table's entry and logs on *lines = the reserve's throttle.
  std::string Refusal(int fd, const absl::StatusOr<PeerCredentials>& peer, LogThrottle** lines) {
    struct stat info {};
    if (!peer.ok()) return std::string(peer.status().message());
    if (::fstat(fd, &info) != 0) return std::string(PosixError("fstat", errno).message());
    // The limits first: they cost a lookup, the reserve may count /proc/self/fd.
    const Caller caller = CallerFromCredentials(peer->uid, peer->gid, peer->pid);
    if (absl::Status admitted = table_.Admit(fd, info.st_ino, caller.uid, caller.admin);
        !admitted.ok()) {
      return std::string(admitted.message());
    }
    if (reserve_.Exhausted(fd)) {
      table_.Release(fd);
      *lines = &reserve_lines_;
      return absl::StrCat("ddod keeps its last ", reserve_.reserve(), " of ", reserve_.limit(),
                          " descriptors for its own work");
    }
    return "";
  }

  const int listener_;
  const int wake_;  // eventfd: Stop() wakes the poll
  const ConnectionGateOptions& options_;
  const ConnectionGate::HandOff& hand_off_;
  const std::shared_ptr<spdlog::logger> log_;
  const std::string& what_;
  ConnectionTable table_;
  const DescriptorReserve reserve_;
  // One throttle per kind of line, so that a flood of one kind hides no other.
  LogThrottle limit_lines_{kLogInterval, 5};
  LogThrottle reserve_lines_{kLogInterval, 3};
  LogThrottle failed_lines_{kLogInterval, 3};
  absl::Duration back_off_ = absl::ZeroDuration();
  uint64_t suppressed_ = 0;
};

}  // namespace

ConnectionGate::ConnectionGate(UniqueFd listener, ConnectionGateOptions options,
                               HandOff hand_off)
    : listener_(std::move(listener)),
      options_(std::move(options)),
      hand_off_(std::move(hand_off)) {}

absl::StatusOr<std::unique_ptr<ConnectionGate>> ConnectionGate::Start(
    UniqueFd listener, ConnectionGateOptions options, HandOff hand_off) {
  // Non-blocking, so that a connection that vanished between poll and accept blocks nothing.
  const int flags = ::fcntl(listener.get(), F_GETFL);
  if (flags < 0 || ::fcntl(listener.get(), F_SETFL, flags | O_NONBLOCK) != 0) {
    return PosixError("fcntl O_NONBLOCK on the listening socket", errno);
  }
  if (options.tcp) options.limits.per_uid = options.limits.in_all;
  std::unique_ptr<ConnectionGate> gate(
      new ConnectionGate(std::move(listener), std::move(options), std::move(hand_off)));
  gate->wake_ = UniqueFd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!gate->wake_.valid()) return PosixError("eventfd", errno);
  gate->thread_ = std::thread([raw = gate.get()] { raw->Run(); });
  return gate;
}

ConnectionGate::HandOff ConnectionGate::ToGrpcServer(grpc::Server& server) {
  return [&server](int fd) { grpc::AddInsecureChannelFromFd(&server, fd); };
}

ConnectionGate::~ConnectionGate() { Stop(); }

void ConnectionGate::Stop() {
  if (!thread_.joinable()) return;
  const uint64_t one = 1;
  (void)!::write(wake_.get(), &one, sizeof(one));
  thread_.join();
  listener_.Reset();
}

void ConnectionGate::Run() { AcceptLoop(listener_.get(), wake_.get(), options_, hand_off_).Run(); }

}  // namespace ddo
