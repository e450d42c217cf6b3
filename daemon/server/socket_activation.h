// File: daemon/server/socket_activation.h
//
// Socket activation (sd_listen_fds(3), docs/deploy.md): when systemd's ddod.socket holds ddod's
// two listening sockets, ddod inherits them instead of binding its own. The gRPC socket is the
// one SOCK_STREAM Unix socket bound to --socket; the identity socket is the SOCK_SEQPACKET one
// bound to "<socket>.id". systemd owns both files: ddod neither binds, chmods nor removes them,
// and connections made while ddod was stopped wait in the backlog for the next start.
//
// Thread-safety: TakeActivatedSockets once, from main, before any thread starts.
#ifndef DDO_DAEMON_SERVER_SOCKET_ACTIVATION_H_
#define DDO_DAEMON_SERVER_SOCKET_ACTIVATION_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ddo/wire/unique_fd.h"

namespace ddo {

// Both valid when ddod was socket-activated, neither when it was not.
struct ActivatedSockets {
  UniqueFd grpc;      // SOCK_STREAM, listening, bound to --socket
  UniqueFd identity;  // SOCK_SEQPACKET, listening, bound to IdentitySocketPath(--socket)

  bool activated() const { return grpc.valid(); }
};

// The sockets systemd passed to this process (LISTEN_PID, LISTEN_FDS; the variables are
// removed so that no child inherits them); none (activated() false) when ddod was not
// socket-activated.
// FAILED_PRECONDITION names what does not match: a descriptor that is not one of the two
// sockets above (ListenStream=/ListenSequentialPacket= must name --socket and "<socket>.id").
absl::StatusOr<ActivatedSockets> TakeActivatedSockets(
    const std::string& grpc_socket_path);

// The matching part of TakeActivatedSockets, for descriptors already taken (tests). Every
// descriptor in `fds` is owned by the result or closed.
absl::StatusOr<ActivatedSockets> ClassifyActivatedSockets(const std::vector<int>& fds,
                                                          const std::string& grpc_socket_path);

}  // namespace ddo

#endif  // DDO_DAEMON_SERVER_SOCKET_ACTIVATION_H_
