#include "daemon/identity/identity_server.h"

#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "daemon/common/logging.h"
#include "daemon/common/runtime_dir.h"
#include "daemon/common/status_macros.h"
#include "ddo/wire/display_text.h"
#include "ddo/wire/identity_protocol.h"
#include "ddo/wire/posix_error.h"
#include "ddo/wire/seqpacket.h"

namespace ddo {
namespace {

constexpr absl::Duration kLogInterval = absl::Seconds(10);
constexpr absl::Duration kFirstBackOff = absl::Milliseconds(10);
constexpr absl::Duration kLongestBackOff = absl::Milliseconds(200);

// ddod never waits for a client to read: one that does not is dropped.
bool Answer(int socket, const std::string& text, int fd = -1) {
  return SendPacket(socket, text, fd, MSG_DONTWAIT);
}

// What OPEN hands over for a grant, with the access granted: a shared-memory segment opened
// by name, or a duplicate of the read-only descriptor a file grant holds. The messages never
// echo the name.
absl::StatusOr<UniqueFd> OpenGranted(const SegmentGrant& grant, bool writable) {
  if (grant.kind == SegmentKind::kPipe) {  // ServeGrant took it: served write-only, once
    UniqueFd copy(::fcntl(grant.file->get(), F_DUPFD_CLOEXEC, 0));
    if (!copy.valid()) return PosixError("duplicating an upload stream's descriptor", errno);
    return copy;
  }
  if (grant.kind == SegmentKind::kFile) {
    // Only ever read-only: a descriptor ddod holds that could write is not handed out.
    const int flags = ::fcntl(grant.file->get(), F_GETFL);
    if (writable || flags < 0 || (flags & O_ACCMODE) != O_RDONLY) {
      return absl::PermissionDeniedError(
          "that file is served read-only, and only from a descriptor opened read-only");
    }
    UniqueFd copy(::fcntl(grant.file->get(), F_DUPFD_CLOEXEC, 0));
    if (!copy.valid()) return PosixError("duplicating the file's descriptor", errno);
    return copy;
  }
  UniqueFd segment(::shm_open(grant.shm_name.c_str(),
                              (writable ? O_RDWR : O_RDONLY) | O_NOFOLLOW | O_CLOEXEC, 0));
  if (!segment.valid()) {
    return absl::NotFoundError(absl::StrCat("the segment is gone: ", std::strerror(errno)));
  }
  return segment;
}

// Milliseconds until `when` for poll: -1 for never, at least 1 otherwise.
int PollTimeout(absl::Time now, absl::Time when) {
  if (when == absl::InfiniteFuture()) return -1;
  const int64_t ms = absl::ToInt64Milliseconds(absl::Ceil(when - now, absl::Milliseconds(1)));
  return static_cast<int>(std::clamp<int64_t>(ms, 1, 60000));
}

}  // namespace

IdentityServer::IdentityServer(IdentityServerOptions options, CallerRegistry& callers)
    : options_(std::move(options)),
      callers_(callers),
      table_("identity socket", options_.limits),
      reserve_(DescriptorReserve::ForThisProcess(options_.descriptor_reserve)),
      limit_lines_(kLogInterval, 5),
      reserve_lines_(kLogInterval, 3),
      failed_lines_(kLogInterval, 3),
      identified_lines_(kLogInterval, 50) {}

absl::StatusOr<std::unique_ptr<IdentityServer>> IdentityServer::Start(
    IdentityServerOptions options, CallerRegistry& callers, UniqueFd inherited_listener) {
  std::unique_ptr<IdentityServer> server(new IdentityServer(std::move(options), callers));
  if (inherited_listener.valid()) {
    const int flags = ::fcntl(inherited_listener.get(), F_GETFL);
    if (flags < 0 || ::fcntl(inherited_listener.get(), F_SETFL, flags | O_NONBLOCK) != 0) {
      return PosixError("fcntl O_NONBLOCK on the inherited identity socket", errno);
    }
    server->listener_ = std::move(inherited_listener);
    server->owns_socket_file_ = false;
  } else {
    DDO_RETURN_IF_ERROR(server->Bind());
  }
  server->wake_ = UniqueFd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!server->wake_.valid()) return PosixError("eventfd", errno);
  server->thread_ = std::thread([raw = server.get()] { raw->Run(); });
  Logger("identity")->info("identity socket {}{}", server->options_.socket_path,
                           server->owns_socket_file_ ? "" : " (from systemd)");
  return server;
}

absl::Status IdentityServer::Bind() {
  const std::string& path = options_.socket_path;
  sockaddr_un address{};
  if (path.size() >= sizeof(address.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the identity socket path ", path, " is longer than a Unix socket path may be (",
        sizeof(address.sun_path) - 1, " bytes); choose a shorter --socket"));
  }
  if (absl::Status removed = RemoveStaleSocket(path); !removed.ok()) return removed;
  listener_ =
      UniqueFd(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!listener_.valid()) return PosixError("socket(AF_UNIX, SOCK_SEQPACKET)", errno);
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  // Owner-only from its first instant; the group is let in below when asked for.
  const mode_t previous_umask = ::umask(0177);
  const int bound =
      ::bind(listener_.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address));
  const int bind_errno = errno;
  ::umask(previous_umask);
  if (bound != 0) return PosixError(absl::StrCat("bind ", path), bind_errno);
  if (!options_.socket_group.empty()) {
    const group* entry = ::getgrnam(options_.socket_group.c_str());
    if (entry == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("--socket-group: no group named '", options_.socket_group, "'"));
    }
    if (::chown(path.c_str(), static_cast<uid_t>(-1), entry->gr_gid) != 0 ||
        ::chmod(path.c_str(), 0660) != 0) {
      return PosixError(absl::StrCat("open ", path, " to group ", options_.socket_group),
                        errno);
    }
  }
  if (::listen(listener_.get(), 128) != 0) {
    return PosixError(absl::StrCat("listen ", path), errno);
  }
  return absl::OkStatus();
}

IdentityServer::~IdentityServer() { Stop(); }

void IdentityServer::Stop() {
  if (stopped_ || !listener_.valid()) return;
  stopped_ = true;
  const uint64_t one = 1;
  (void)!::write(wake_.get(), &one, sizeof(one));
  if (thread_.joinable()) thread_.join();
  for (auto& [fd, connection] : connections_) {
    if (!connection.token.empty()) callers_.Remove(connection.token);
  }
  connections_.clear();
  if (owns_socket_file_) ::unlink(options_.socket_path.c_str());
}

void IdentityServer::Run() {
  std::vector<pollfd> polled;
  absl::Duration back_off = absl::ZeroDuration();
  absl::Time back_off_until = absl::InfinitePast();
  while (true) {
    const absl::Time now = absl::Now();
    const absl::Time hello_due = DropSilent(now);  // first: a drop is reported at once
    const absl::Time next = std::min(hello_due, ReportSuppressed(now));
    // While backing off the listener stays out of the poll: it is readable until accepted.
    const bool backing_off = now < back_off_until;
    polled.clear();
    polled.push_back({wake_.get(), POLLIN, 0});
    polled.push_back({listener_.get(), static_cast<short>(backing_off ? 0 : POLLIN), 0});
    for (const auto& [fd, connection] : connections_) polled.push_back({fd, POLLIN, 0});
    const int timeout =
        PollTimeout(now, backing_off ? std::min(next, back_off_until) : next);
    if (::poll(polled.data(), polled.size(), timeout) < 0) {
      if (errno == EINTR) continue;
      Logger("identity")->error("poll failed: {}; identity socket stopped", std::strerror(errno));
      return;
    }
    if (polled[0].revents != 0) return;  // Stop()
    const bool try_accept = backing_off ? absl::Now() >= back_off_until
                                        : (polled[1].revents & POLLIN) != 0;
    if (try_accept) {
      if (AcceptAll()) {
        back_off = absl::ZeroDuration();
      } else {
        back_off = std::clamp(back_off * 2, kFirstBackOff, kLongestBackOff);
        back_off_until = absl::Now() + back_off;
      }
    }
    for (size_t i = 2; i < polled.size(); ++i) {
      if (polled[i].revents == 0) continue;
      auto it = connections_.find(polled[i].fd);
      if (it == connections_.end()) continue;
      if ((polled[i].revents & POLLIN) == 0 || !Serve(it->second)) Drop(polled[i].fd);
    }
  }
}

bool IdentityServer::AcceptAll() {
  auto log = Logger("identity");
  uint64_t suppressed = 0;
  while (true) {
    UniqueFd fd(::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
    if (!fd.valid()) {
      const int error = errno;
      if (error == EINTR || error == ECONNABORTED) continue;
      if (error == EAGAIN || error == EWOULDBLOCK) return true;
      // EMFILE, ENFILE, ENOBUFS, ENOMEM: the connection waits in the backlog; the loop backs
      // off instead of spinning on a listener that stays readable.
      if (failed_lines_.Admit(absl::Now(), suppressed)) {
        log->warn("accept on the identity socket: {}; backing off{}", std::strerror(error),
                  SuppressedNote(suppressed));
      }
      return false;
    }
    std::string refusal;
    LogThrottle* lines = &limit_lines_;
    absl::StatusOr<PeerCredentials> peer = PeerCredentialsOf(fd.get());
    Caller caller;
    if (!peer.ok()) {
      refusal = std::string(peer.status().message());
    } else {
      // The limits first: they cost a lookup, the reserve may count /proc/self/fd. The
      // identity server closes its connections itself (Drop): no inode is needed.
      caller = CallerFromCredentials(peer->uid, peer->gid, peer->pid);
      if (absl::Status admitted = table_.Admit(fd.get(), 0, caller.uid, caller.admin);
          !admitted.ok()) {
        refusal = std::string(admitted.message());
      } else if (reserve_.Exhausted(fd.get())) {
        table_.Release(fd.get());
        lines = &reserve_lines_;
        refusal = absl::StrCat("ddod keeps its last ", reserve_.reserve(), " of ",
                               reserve_.limit(), " descriptors for its own work");
      }
    }
    if (!refusal.empty()) {
      // Closed at once, unanswered: a connection kept to answer would hold the very slot it
      // was refused. The client sees the connection end before HELLO's answer.
      if (lines->Admit(absl::Now(), suppressed)) {
        log->warn("refused an identity connection{}: {}{}",
                  peer.ok() ? absl::StrCat(" of uid ", peer->uid, " pid ", peer->pid) : "",
                  refusal, SuppressedNote(suppressed));
      }
      continue;
    }
    const int key = fd.get();
    connections_.emplace(
        key, Connection{std::move(fd), caller, "", absl::Now() + options_.hello_deadline});
  }
}

absl::Time IdentityServer::DropSilent(absl::Time now) {
  absl::Time earliest = absl::InfiniteFuture();
  for (auto it = connections_.begin(); it != connections_.end();) {
    const Connection& connection = it->second;
    if (!connection.token.empty()) {
      ++it;
    } else if (connection.hello_by <= now) {
      table_.Release(it->first);
      it = connections_.erase(it);
      ++silent_dropped_;
    } else {
      earliest = std::min(earliest, connection.hello_by);
      ++it;
    }
  }
  return earliest;
}

absl::Time IdentityServer::ReportSuppressed(absl::Time now) {
  auto log = Logger("identity");
  if (const uint64_t held = limit_lines_.TakeSuppressed(now); held > 0) {
    log->warn("refused {} more identity connection(s) in the last {}", held,
              absl::FormatDuration(kLogInterval));
  }
  if (const uint64_t held = reserve_lines_.TakeSuppressed(now); held > 0) {
    log->warn("refused {} more identity connection(s) in the last {} to keep the descriptor "
              "reserve", held, absl::FormatDuration(kLogInterval));
  }
  if (const uint64_t held = failed_lines_.TakeSuppressed(now); held > 0) {
    log->warn("accept on the identity socket failed {} more time(s) in the last {}", held,
              absl::FormatDuration(kLogInterval));
  }
  if (const uint64_t held = identified_lines_.TakeSuppressed(now); held > 0) {
    log->info("{} more caller(s) identified in the last {}", held,
              absl::FormatDuration(kLogInterval));
  }
  // Silent connections are said in one line per interval at most, however many there were.
  absl::Time silent_next = absl::InfiniteFuture();
  if (silent_dropped_ > 0) {
    if (now - silent_reported_ >= kLogInterval) {
      log->warn("dropped {} identity connection(s) that sent no HELLO within {}",
                silent_dropped_, absl::FormatDuration(options_.hello_deadline));
      silent_dropped_ = 0;
      silent_reported_ = now;
    } else {
      silent_next = silent_reported_ + kLogInterval;
    }
  }
  return std::min({silent_next, limit_lines_.NextReport(), reserve_lines_.NextReport(),
                   failed_lines_.NextReport(),
                   identified_lines_.NextReport()});
}

bool IdentityServer::Serve(Connection& connection) {
  absl::StatusOr<Packet> packet =
      ReceivePacket(connection.fd.get(), kIdentityMaxPacketBytes, MSG_DONTWAIT);
  if (!packet.ok()) return false;          // closed by the caller, or broken
  if (packet->would_block) return true;   // a wake-up with nothing to read
  std::vector<UniqueFd>& passed = packet->fds;
  if (packet->truncated) {
    return Answer(connection.fd.get(),
                  IdentityError("request too long, or too many descriptors"));
  }
  absl::StatusOr<IdentityRequest> request =
      ParseIdentityRequest(packet->text, static_cast<int>(passed.size()));
  if (!request.ok()) {
    return Answer(connection.fd.get(), IdentityError(request.status().message()));
  }
  if (request->kind == IdentityRequest::Kind::kHello) {
    if (connection.token.empty()) {
      connection.token = callers_.Add(connection.caller);
      if (uint64_t suppressed = 0; identified_lines_.Admit(absl::Now(), suppressed)) {
        Logger("identity")->info("caller {} identified{}", connection.caller.Describe(),
                                 SuppressedNote(suppressed));
      }
    }
    return Answer(connection.fd.get(), IdentityOk(connection.token));
  }
  if (connection.token.empty()) {
    return Answer(connection.fd.get(), IdentityError("send HELLO 1 first"));
  }
  if (request->kind == IdentityRequest::Kind::kFile) {
    // ddod reads what it is passed: an O_PATH or write-only descriptor (which needs no read
    // permission) proves nothing about the file and is refused like a FIFO.
    const int flags = ::fcntl(passed[0].get(), F_GETFL);
    struct stat info {};
    if (flags < 0 || (flags & O_PATH) != 0 || (flags & O_ACCMODE) == O_WRONLY ||
        ::fstat(passed[0].get(), &info) != 0 || !S_ISREG(info.st_mode)) {
      return Answer(connection.fd.get(),
                        IdentityError("FILE takes a regular file opened for reading"));
    }
    absl::StatusOr<uint64_t> handle =
        callers_.AddFile(connection.token, PassedFile{request->name, std::move(passed[0])});
    if (!handle.ok()) return Answer(connection.fd.get(), IdentityError(handle.status().message()));
    return Answer(connection.fd.get(), IdentityOk(absl::StrCat(*handle)));
  }
  // OPEN: only what this connection was granted, with no more access than granted (a pipe's
  // write end only once).
  absl::StatusOr<SegmentGrant> granted =
      callers_.ServeGrant(connection.token, request->name, request->writable);
  if (!granted.ok()) return Answer(connection.fd.get(), IdentityError(granted.status().message()));
  absl::StatusOr<UniqueFd> opened = OpenGranted(*granted, request->writable);
  if (!opened.ok()) return Answer(connection.fd.get(), IdentityError(opened.status().message()));
  return Answer(connection.fd.get(), IdentityOk(), opened->get());
}

void IdentityServer::Drop(int fd) {
  auto it = connections_.find(fd);
  if (it == connections_.end()) return;
  if (!it->second.token.empty()) callers_.Remove(it->second.token);
  table_.Release(fd);
  connections_.erase(it);
}

}  // namespace ddo
