#include "daemon/server/socket_activation.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <systemd/sd-daemon.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "ddo/wire/identity_protocol.h"
#include "ddo/wire/posix_error.h"

namespace ddo {
namespace {

// What one inherited descriptor is, as much as the error messages need.
struct SocketShape {
  bool is_socket = false;
  bool is_unix = false;
  bool listening = false;
  int type = 0;
  std::string path;  // empty for an unnamed or abstract socket
};

SocketShape ShapeOf(int fd) {
  SocketShape shape;
  int type = 0;
  socklen_t length = sizeof(type);
  if (::getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &length) != 0) return shape;
  shape.is_socket = true;
  shape.type = type;
  int listening = 0;
  length = sizeof(listening);
  shape.listening =
      ::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &length) == 0 && listening != 0;
  sockaddr_un address{};
  length = sizeof(address);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0 ||
      address.sun_family != AF_UNIX) {
    return shape;
  }
  shape.is_unix = true;
  const size_t path_bytes = length > offsetof(sockaddr_un, sun_path)
                                ? length - offsetof(sockaddr_un, sun_path)
                                : 0;
  if (path_bytes > 0 && address.sun_path[0] != '\0') {
    shape.path = std::string(address.sun_path, strnlen(address.sun_path, path_bytes));
  }
  return shape;
}

std::string Describe(int fd, const SocketShape& shape) {
  if (!shape.is_socket) return absl::StrCat("descriptor ", fd, " is not a socket");
  if (!shape.is_unix) return absl::StrCat("descriptor ", fd, " is not a Unix socket");
  const char* type = shape.type == SOCK_STREAM      ? "SOCK_STREAM"
                     : shape.type == SOCK_SEQPACKET ? "SOCK_SEQPACKET"
                                                    : "Unix";
  return absl::StrCat("descriptor ", fd, " is a ", shape.listening ? "listening " : "", type,
                      " socket ",
                      shape.path.empty() ? "without a path" : absl::StrCat("bound to ", shape.path));
}

}  // namespace

absl::StatusOr<ActivatedSockets> ClassifyActivatedSockets(const std::vector<int>& fds,
                                                          const std::string& grpc_socket_path) {
  // Own every descriptor first, so that each one is closed on any error below.
  std::vector<UniqueFd> owned;
  owned.reserve(fds.size());
  for (int fd : fds) owned.emplace_back(fd);

  const std::string identity_path = IdentitySocketPath(grpc_socket_path);
  const std::string wanted = absl::StrCat(
      "ddod.socket must pass exactly a ListenStream=", grpc_socket_path,
      " and a ListenSequentialPacket=", identity_path, " (the --socket ddod was given)");
  ActivatedSockets sockets;
  for (UniqueFd& fd : owned) {
    const SocketShape shape = ShapeOf(fd.get());
    UniqueFd* slot = nullptr;
    if (shape.is_unix && shape.listening && shape.type == SOCK_STREAM &&
        shape.path == grpc_socket_path) {
      slot = &sockets.grpc;
    } else if (shape.is_unix && shape.listening && shape.type == SOCK_SEQPACKET &&
               shape.path == identity_path) {
      slot = &sockets.identity;
    }
    if (slot == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat("socket activation: ", Describe(fd.get(), shape), "; ", wanted));
    }
    if (slot->valid()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "socket activation: ", Describe(fd.get(), shape), " came twice; ", wanted));
    }
    *slot = std::move(fd);
  }
  if (!sockets.grpc.valid() || !sockets.identity.valid()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "socket activation: systemd passed ", fds.size(), " socket(s) but not the ",
        sockets.grpc.valid() ? "identity socket " + identity_path
                             : "gRPC socket " + grpc_socket_path,
        "; ", wanted));
  }
  return sockets;
}

absl::StatusOr<ActivatedSockets> TakeActivatedSockets(
    const std::string& grpc_socket_path) {
  const int count = sd_listen_fds(/*unset_environment=*/1);
  if (count < 0) return PosixError("sd_listen_fds (LISTEN_FDS)", -count);
  if (count == 0) return ActivatedSockets();
  std::vector<int> fds;
  for (int fd = SD_LISTEN_FDS_START; fd < SD_LISTEN_FDS_START + count; ++fd) {
    ::fcntl(fd, F_SETFD, FD_CLOEXEC);  // systemd passes them inheritable
    fds.push_back(fd);
  }
  return ClassifyActivatedSockets(fds, grpc_socket_path);
}

}  // namespace ddo
