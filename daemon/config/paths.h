// File: daemon/config/paths.h
//
// Where ddod listens and keeps its state by default, and where clients look for it.
//
//   socket:  root: /run/ddo/ddod.sock
//            user: $XDG_RUNTIME_DIR/ddo/ddod.sock, else /tmp/ddo-<uid>/ddod.sock
//   state:   root: /var/lib/ddo
//            user: $XDG_STATE_HOME/ddo, else ~/.local/state/ddo, else /tmp/ddo-<uid>/state
#ifndef DDO_DAEMON_CONFIG_PATHS_H_
#define DDO_DAEMON_CONFIG_PATHS_H_

#include <string>
#include <vector>

#include "daemon/config/environment.h"

namespace ddo {

// The socket of a system-wide ddod service (systemd unit in deploy/).
inline constexpr char kSystemSocketPath[] = "/run/ddo/ddod.sock";

// The socket ddod binds when --socket is not given.
std::string DefaultSocketPath(const UserContext& user);

// The sockets a client tries, in order, when DDO_DAEMON does not name one: the user's own
// daemon first, then the system service.
std::vector<std::string> DefaultSocketCandidates(const UserContext& user);

// ddod's state directory when --state-dir is not given.
std::string DefaultStateDir(const UserContext& user);

}  // namespace ddo

#endif  // DDO_DAEMON_CONFIG_PATHS_H_
