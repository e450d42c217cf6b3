// File: proto/wire/include/ddo/wire/connect_to_daemon.h
//
// Finding and trusting ddod: the one sequence ddoctl (daemon/ctl/ctl_connection.cc) and the C++
// client (client-cpp/src/rpc/connect.cc) follow; the Python client follows it step for step
// (client.py, identity.py). docs/security.md, "Finding the daemon", is its description. For each
// target, in order:
//
//   1. location  before any byte is sent: for a Unix socket, the per-user directory
//                (CheckPerUserDirectoryOf), a socket file there, then the socket's owner and its
//                directory (CheckSocketLocation); for TCP, a listener on the port, every one
//                owned by a trusted user (CheckTcpListener).
//   2. health    grpc.health.v1 Check answers SERVING.
//   3. identity socket  beside a Unix socket (IdentitySocketPath); over TCP the one GetInfo
//                names (GetInfo needs no token), after the port is checked again. Either is
//                checked as in step 1 (CheckSocketLocation) before it is used.
//   4. handshake the process behind the identity socket runs as a trusted uid, HELLO, the token
//                (IdentityLink::Connect).
//
// A target where nothing answers (no socket file, nothing on the port, the health check failing
// or not SERVING) is passed over for the next. A location another user could have made
// (PERMISSION_DENIED) ends the search at once: the user should learn that someone may be
// impersonating their ddod. So does any failure after step 2: a daemon answered, and what it
// (or its identity socket) did wrong is the user's to see. With every target passed over: UNAVAILABLE
// "no ddod answered at T1 (why); T2 (why)", to which callers add their own hint.
//
// Thread-safety: ConnectToDaemon and MakeDaemonChannel may be called from any thread; a
// DaemonConnection is used as its parts say (grpc::Channel and IdentityLink are thread-safe).
#ifndef DDO_WIRE_CONNECT_TO_DAEMON_H_
#define DDO_WIRE_CONNECT_TO_DAEMON_H_

#include <grpcpp/channel.h>
#include <sys/types.h>

#include <memory>
#include <set>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "ddo/wire/daemon_address.h"
#include "ddo/wire/identity_client.h"

namespace ddo {

struct DaemonConnectOptions {
  // The uids ddod may run as (TrustedDaemonUidsFromEnvironment, usually).
  std::set<uid_t> trusted;
  // The deadline of step 2's health check, per target.
  absl::Duration health_timeout = absl::Seconds(2);
  // The deadline of GetInfo, and of each answer on the identity socket.
  absl::Duration call_timeout = absl::Seconds(5);
};

// A trusted daemon that answered SERVING, with this process's identity proven to it.
struct DaemonConnection {
  std::string target;  // the gRPC target that answered
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<IdentityLink> identity;  // its token goes with every ddo.v1.Ddo call
};

// The sequence above over `targets.targets` (ResolveDaemonTargets). UNAVAILABLE listing every
// target and why when none answers (NoDaemonAnswered tells it apart); PERMISSION_DENIED saying
// what is wrong with a location or a daemon's uid; the failing step's status (GetInfo, the
// identity socket) otherwise.
absl::StatusOr<DaemonConnection> ConnectToDaemon(const DaemonTargets& targets,
                                                 const DaemonConnectOptions& options);

// True for ConnectToDaemon's error when every target was passed over: where a caller may add
// a hint, or start a private daemon instead.
bool NoDaemonAnswered(const absl::Status& status);

// An insecure channel to `target` (the identity socket, not TLS, says who is who) that carries
// messages up to ddod's limit of 64 MiB either way.
std::shared_ptr<grpc::Channel> MakeDaemonChannel(const std::string& target);

}  // namespace ddo

#endif  // DDO_WIRE_CONNECT_TO_DAEMON_H_
