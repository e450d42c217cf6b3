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

void ConnectionGate::Run() {
  auto log = Logger("server");
  const std::string& what = options_.what;
  ConnectionTable table(what, options_.limits, StillOpen);
  const DescriptorReserve reserve = DescriptorReserve::ForThisProcess(options_.descriptor_reserve);
  // One throttle per kind of line, so that a flood of one kind hides no other.
  LogThrottle limit_lines(kLogInterval, 5);
  LogThrottle reserve_lines(kLogInterval, 3);
  LogThrottle failed_lines(kLogInterval, 3);
  absl::Duration back_off = absl::ZeroDuration();
  uint64_t suppressed = 0;

  while (true) {
    const absl::Time now = absl::Now();
    if (const uint64_t held = limit_lines.TakeSuppressed(now); held > 0) {
      log->warn("{}: {} more connection(s) refused in the last {}", what, held,
                absl::FormatDuration(kLogInterval));
    }
    if (const uint64_t held = reserve_lines.TakeSuppressed(now); held > 0) {
      log->warn("{}: {} more connection(s) refused in the last {} to keep the descriptor reserve",
                what, held, absl::FormatDuration(kLogInterval));
    }
    if (const uint64_t held = failed_lines.TakeSuppressed(now); held > 0) {
      log->warn("{}: accept failed {} more time(s) in the last {}", what, held,
                absl::FormatDuration(kLogInterval));
    }
    // Backing off: wait on Stop() alone, then try accept again. Otherwise wait for a
    // connection, or for the moment a suppressed count is due.
    const bool backing_off = back_off > absl::ZeroDuration();
    const absl::Time report = std::min(
        {limit_lines.NextReport(), reserve_lines.NextReport(), failed_lines.NextReport()});
    const int timeout = backing_off ? PollTimeout(now, now + back_off) : PollTimeout(now, report);
    pollfd polled[2] = {{wake_.get(), POLLIN, 0}, {listener_.get(), POLLIN, 0}};
    if (::poll(polled, backing_off ? 1 : 2, timeout) < 0) {
      if (errno == EINTR) continue;
      log->error("poll on the {}: {}; no new connections are accepted", what,
                 std::strerror(errno));
      return;
    }
    if (polled[0].revents != 0) return;  // Stop()
    if (!backing_off && polled[1].revents == 0) continue;  // a report was due

    bool out_of_descriptors = false;
    while (true) {
      UniqueFd fd(::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
      if (!fd.valid()) {
        const int error = errno;
        if (error == EINTR || error == ECONNABORTED) continue;
        if (error == EAGAIN || error == EWOULDBLOCK) break;
        // EMFILE, ENFILE, ENOBUFS, ENOMEM: the connection waits in the backlog until
        // descriptors are back; anything else is waited out the same way, quietly.
        out_of_descriptors = true;
        if (failed_lines.Admit(absl::Now(), suppressed)) {
          log->warn("accept on the {}: {}; retrying in {}{}", what, std::strerror(error),
                    absl::FormatDuration(std::clamp(back_off * 2, kFirstBackOff,
                                                    kLongestBackOff)),
                    SuppressedNote(suppressed));
        }
        break;
      }
      std::string refusal;
      LogThrottle* lines = &limit_lines;
      absl::StatusOr<PeerCredentials> peer =
          options_.tcp ? absl::StatusOr<PeerCredentials>(TcpPeer()) : PeerCredentialsOf(fd.get());
      struct stat info {};
      if (!peer.ok()) {
        refusal = std::string(peer.status().message());
      } else if (::fstat(fd.get(), &info) != 0) {
        refusal = std::string(PosixError("fstat", errno).message());
      } else {
        // The limits first: they cost a lookup, the reserve may count /proc/self/fd.
        const Caller caller = CallerFromCredentials(peer->uid, peer->gid, peer->pid);
        if (absl::Status admitted = table.Admit(fd.get(), info.st_ino, caller.uid, caller.admin);
            !admitted.ok()) {
          refusal = std::string(admitted.message());
        } else if (reserve.Exhausted(fd.get())) {
          table.Release(fd.get());
          lines = &reserve_lines;
          refusal = absl::StrCat("ddod keeps its last ", reserve.reserve(), " of ",
                                 reserve.limit(), " descriptors for its own work");
        }
      }
      if (refusal.empty()) {
        hand_off_(fd.Release());
        continue;
      }
      if (lines->Admit(absl::Now(), suppressed)) {
        log->warn("refused a connection to the {}{}: {}{}", what,
                  peer.ok() && !options_.tcp
                      ? absl::StrCat(" of uid ", peer->uid, " pid ", peer->pid) : "",
                  refusal, SuppressedNote(suppressed));
      }
      // fd closes here: the client sees its connection end before any answer.
    }
    back_off = out_of_descriptors ? std::clamp(back_off * 2, kFirstBackOff, kLongestBackOff)
                                  : absl::ZeroDuration();
  }
}

}  // namespace ddo
