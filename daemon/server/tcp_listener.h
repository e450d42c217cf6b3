// File: daemon/server/tcp_listener.h
//
// The listening socket of --listen HOST:PORT, bound by ddod itself so that its ConnectionGate
// (connection_gate.h) accepts there as it does on the Unix socket: gRPC's own TCP listener
// accepts without bound and could be abandoned after EMFILE (grpc/grpc#16058).
//
// Thread-safety: a free function; nothing shared.
#ifndef DDO_DAEMON_SERVER_TCP_LISTENER_H_
#define DDO_DAEMON_SERVER_TCP_LISTENER_H_

#include <string>

#include "absl/status/statusor.h"
#include "ddo/wire/unique_fd.h"

namespace ddo {

struct TcpListener {
  UniqueFd fd;  // listening, close-on-exec
  int port = 0;  // the port bound (the one the system chose for port 0)
};

// Binds and listens on `host_port` ("127.0.0.1:50051", "[::1]:0", "localhost:7000"): the first
// address the name resolves to that can be bound. INVALID_ARGUMENT for a malformed address,
// UNAVAILABLE naming the address and the error when none can be bound (in use?).
absl::StatusOr<TcpListener> ListenOnTcp(const std::string& host_port);

}  // namespace ddo

#endif  // DDO_DAEMON_SERVER_TCP_LISTENER_H_
