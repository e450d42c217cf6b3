// File: daemon/ctl/daemon_address.h
//
// Where a client finds ddod: DDO_DAEMON, when set, names one address; otherwise the default
// sockets are tried in order (config/paths.h). The Python client follows the same rules.
//
//   unset, "" or "auto"   the default sockets
//   "embedded"            a private daemon started by the client itself (Python client only)
//   "unix:/abs/path", "unix:///abs/path", "/abs/path"   a Unix socket
//   "host:port", "[::1]:port"                          loopback TCP
#ifndef DDO_DAEMON_CTL_DAEMON_ADDRESS_H_
#define DDO_DAEMON_CTL_DAEMON_ADDRESS_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "daemon/config/environment.h"

namespace ddo {

struct DaemonTargets {
  // gRPC target strings, in the order to try them.
  std::vector<std::string> targets;
  // True when DDO_DAEMON named the address: nothing else may be tried.
  bool fixed = false;
  // True for DDO_DAEMON=embedded.
  bool embedded = false;
};

// `value` is DDO_DAEMON (or --daemon). Invalid values are InvalidArgument naming the value and
// the accepted forms.
absl::StatusOr<DaemonTargets> ResolveDaemonTargets(const std::optional<std::string>& value,
                                                   const UserContext& user);

// The filesystem path of a "unix:" target, or "" for other targets.
std::string UnixSocketPath(const std::string& target);

}  // namespace ddo

#endif  // DDO_DAEMON_CTL_DAEMON_ADDRESS_H_
