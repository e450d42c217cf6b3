// File: daemon/server/connection_gate.h
//
// ddod's accept loop for its gRPC Unix socket. gRPC's own listener accepts whatever comes, and
// once accept failed with EMFILE gRPC 1.51 could abandon the listener for good
// (grpc/grpc#16058); so ddod listens itself (on the socket it bound, or the one systemd passed)
// and one thread accepts each connection, reads its peer's uid from the kernel (SO_PEERCRED),
// and either hands it to the server (grpc::AddInsecureChannelFromFd), which serves it like any
// other, or closes it at once: over the connections one uid may hold, over the total, or when
// it would eat into the descriptor reserve (connection_table.h, descriptor_reserve.h).
//
// Accept failing for want of descriptors (EMFILE, ENFILE) is waited out with a short back-off
// (10 ms doubling to 200 ms) instead of a spin, and repeated lines are throttled
// (log_throttle.h). After a flood ends, the next connection is accepted within the back-off.
//
// Knowing which handed-off connections are alive: gRPC owns and closes them, and keeping a
// duplicate descriptor to watch would double what each costs. The gate remembers each one's
// descriptor number and socket inode, and when a limit would refuse a connection it first
// asks fstat of each: a closed number fails, and a number the kernel gave out again names
// another file, whose inode differs (socket inodes are unique while the socket exists). At
// worst a stale entry is counted as open until its number is reused or checked again: a
// refusal too many, never a connection too many.
//
// Thread-safety: Start and Stop from one thread; Stop before the gRPC server shuts down.
#ifndef DDO_DAEMON_SERVER_CONNECTION_GATE_H_
#define DDO_DAEMON_SERVER_CONNECTION_GATE_H_

#include <grpcpp/server.h>

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "daemon/common/connection_table.h"
#include "ddo/wire/unique_fd.h"

namespace ddo {

struct ConnectionGateOptions {
  // Names the socket in messages and logs.
  std::string what = "gRPC socket";
  ConnectionLimits limits;
  // Descriptors kept for ddod's own work (descriptor_reserve.h).
  size_t descriptor_reserve = 256;
  // A TCP listener (--listen): the kernel names no uid there, so every peer counts in one
  // bucket bounded by limits.in_all (and the reserve); the token decides what each may do.
  bool tcp = false;
};

class ConnectionGate {
 public:
  // Takes ownership of an accepted connection's descriptor.
  using HandOff = std::function<void(int fd)>;

  // Starts accepting on `listener` (a listening stream socket), handing what it admits to
  // `hand_off`, which must outlive Stop().
  static absl::StatusOr<std::unique_ptr<ConnectionGate>> Start(UniqueFd listener,
                                                               ConnectionGateOptions options,
                                                               HandOff hand_off);
  // A HandOff to `server` (which must be started and outlive Stop()).
  static HandOff ToGrpcServer(grpc::Server& server);

  ConnectionGate(const ConnectionGate&) = delete;
  ConnectionGate& operator=(const ConnectionGate&) = delete;
  ~ConnectionGate();

  // Stops accepting and closes the listening socket; connections already handed over stay
  // their owner's. (systemd keeps its own copy of a socket it passed: connections queue there
  // until the next start.)
  void Stop();

 private:
  ConnectionGate(UniqueFd listener, ConnectionGateOptions options, HandOff hand_off);
  void Run();

  UniqueFd listener_;
  UniqueFd wake_;  // eventfd: Stop() wakes the poll
  const ConnectionGateOptions options_;
  HandOff hand_off_;
  std::thread thread_;
};

}  // namespace ddo

#endif  // DDO_DAEMON_SERVER_CONNECTION_GATE_H_
