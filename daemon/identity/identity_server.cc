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

#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/common/display_text.h"
#include "daemon/common/logging.h"
#include "daemon/common/posix_error.h"
#include "daemon/common/runtime_dir.h"
#include "daemon/common/status_macros.h"
#include "ddo/wire/identity_protocol.h"
#include "ddo/wire/seqpacket.h"

namespace ddo {
namespace {

// ddod never waits for a client to read: one that does not is dropped.
bool Answer(int socket, const std::string& text, int fd = -1) {
  return SendPacket(socket, text, fd, MSG_DONTWAIT);
}

}  // namespace

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
  while (true) {
    polled.clear();
    polled.push_back({wake_.get(), POLLIN, 0});
    polled.push_back({listener_.get(), POLLIN, 0});
    for (const auto& [fd, connection] : connections_) polled.push_back({fd, POLLIN, 0});
    if (::poll(polled.data(), polled.size(), -1) < 0) {
      if (errno == EINTR) continue;
      Logger("identity")->error("poll failed: {}; identity socket stopped", std::strerror(errno));
      return;
    }
    if (polled[0].revents != 0) return;  // Stop()
    if (polled[1].revents != 0) AcceptAll();
    for (size_t i = 2; i < polled.size(); ++i) {
      if (polled[i].revents == 0) continue;
      auto it = connections_.find(polled[i].fd);
      if (it == connections_.end()) continue;
      if ((polled[i].revents & POLLIN) == 0 || !Serve(it->second)) Drop(polled[i].fd);
    }
  }
}

void IdentityServer::AcceptAll() {
  auto log = Logger("identity");
  while (true) {
    UniqueFd fd(::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
    if (!fd.valid()) {
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ECONNABORTED) {
        log->warn("accept on the identity socket: {}", std::strerror(errno));
      }
      return;
    }
    absl::StatusOr<PeerCredentials> peer = PeerCredentialsOf(fd.get());
    if (!peer.ok()) {
      log->warn("{}; connection refused", peer.status().message());
      continue;
    }
    const Caller caller = CallerFromCredentials(peer->uid, peer->gid, peer->pid);
    size_t of_uid = 0;
    for (const auto& [other, connection] : connections_) {
      of_uid += connection.caller.uid == caller.uid ? 1 : 0;
    }
    if (connections_.size() >= options_.max_connections) {
      log->warn("refused an identity connection of {}: {} connections in all, the limit",
                caller.Describe(), options_.max_connections);
      continue;  // closed at once: every descriptor counts
    }
    std::string refusal;
    if (of_uid >= options_.max_connections_per_uid) {
      // Kept just long enough to answer its first request with the reason, so that the
      // client's own error says which limit it met.
      refusal = absl::StrCat("RESOURCE_EXHAUSTED: uid ", caller.uid, " already holds ", of_uid,
                             " identity connections, the limit per user");
      log->warn("refused an identity connection of {}: connection limit per user",
                caller.Describe());
    }
    const int key = fd.get();
    connections_.emplace(key, Connection{std::move(fd), caller, "", std::move(refusal)});
  }
}

bool IdentityServer::Serve(Connection& connection) {
  absl::StatusOr<Packet> packet =
      ReceivePacket(connection.fd.get(), kIdentityMaxPacketBytes, MSG_DONTWAIT);
  if (!packet.ok()) return false;          // closed by the caller, or broken
  if (packet->would_block) return true;   // a wake-up with nothing to read
  if (!connection.refusal.empty()) {
    Answer(connection.fd.get(), IdentityError(connection.refusal));
    return false;
  }
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
      Logger("identity")->info("caller {} identified", connection.caller.Describe());
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
  // OPEN: only what this connection was granted, with no more access than granted.
  if (absl::Status granted = callers_.CheckGrant(connection.token, request->name,
                                                 request->writable);
      !granted.ok()) {
    return Answer(connection.fd.get(), IdentityError(granted.message()));
  }
  UniqueFd segment(::shm_open(request->name.c_str(),
                              (request->writable ? O_RDWR : O_RDONLY) | O_NOFOLLOW | O_CLOEXEC,
                              0));
  if (!segment.valid()) {
    return Answer(connection.fd.get(),
                      IdentityError(absl::StrCat("the segment is gone: ", std::strerror(errno))));
  }
  return Answer(connection.fd.get(), IdentityOk(), segment.get());
}

void IdentityServer::Drop(int fd) {
  auto it = connections_.find(fd);
  if (it == connections_.end()) return;
  if (!it->second.token.empty()) callers_.Remove(it->second.token);
  connections_.erase(it);
}

}  // namespace ddo
