// File: proto/wire/include/ddo/wire/daemon_address.h
//
// Where a client finds ddod, and where ddod listens by default: one set of rules for ddod,
// ddoctl and the C++ client (client-python/src/diffusers_dynamic_offloader/addresses.py is the
// Python copy). DDO_DAEMON, when set, names one address; otherwise the default sockets are
// tried in order.
//
//   unset, "" or "auto"   the default sockets (DefaultSocketCandidates)
//   "embedded"            a private daemon started by the client itself
//   "unix:/abs/path", "unix:///abs/path", "/abs/path"   a Unix socket
//   "host:port", "[::1]:port"                          loopback TCP
//
//   default socket:  root: /run/ddo/ddod.sock
//                    user: $XDG_RUNTIME_DIR/ddo/ddod.sock, else /tmp/ddo-<uid>/ddod.sock
//
// Thread-safety: pure functions, except SocketUser::FromProcess (reads the environment).
#ifndef DDO_WIRE_DAEMON_ADDRESS_H_
#define DDO_WIRE_DAEMON_ADDRESS_H_

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace ddo {

// The socket of a system-wide ddod service (systemd unit in deploy/).
inline constexpr char kSystemSocketPath[] = "/run/ddo/ddod.sock";

// sockaddr_un.sun_path holds 108 bytes with the terminating NUL.
inline constexpr size_t kMaxSocketPathBytes = 107;

// The facts about a user that decide the default socket.
struct SocketUser {
  uid_t uid = 0;
  std::string xdg_runtime_dir;  // may be empty

  // The calling process's effective uid and XDG_RUNTIME_DIR.
  static SocketUser FromProcess();
};

// The directory of a user's socket without XDG_RUNTIME_DIR: "/tmp/ddo-<uid>".
std::string PerUserDirectory(uid_t uid);

// The socket ddod binds when --socket is not given.
std::string DefaultSocketPath(const SocketUser& user);

// The sockets a client tries, in order, when DDO_DAEMON does not name one: the user's own
// daemon first, then the system service.
std::vector<std::string> DefaultSocketCandidates(const SocketUser& user);

struct DaemonTargets {
  // gRPC target strings, in the order to try them.
  std::vector<std::string> targets;
  // True when DDO_DAEMON named the address: nothing else may be tried.
  bool fixed = false;
  // True for DDO_DAEMON=embedded.
  bool embedded = false;
};

// `value` is DDO_DAEMON (or --daemon, or a client's address). Invalid values are
// INVALID_ARGUMENT naming the value and the accepted forms.
absl::StatusOr<DaemonTargets> ResolveDaemonTargets(const std::optional<std::string>& value,
                                                   const SocketUser& user);

// The filesystem path of a "unix:" target, or "" for other targets.
std::string UnixSocketPath(const std::string& target);

// The port of a "host:port" or "[v6]:port" target; 0 for other targets.
int TcpPort(const std::string& target);

}  // namespace ddo

#endif  // DDO_WIRE_DAEMON_ADDRESS_H_
