// File: daemon/config/paths.h
//
// Where ddod listens and keeps its state by default, and where clients look for it.
//
//   socket:  root: /run/ddo/ddod.sock
//            user: $XDG_RUNTIME_DIR/ddo/ddod.sock, else /tmp/ddo-<uid>/ddod.sock
//   state:   root: /var/lib/ddo
//            user: $XDG_STATE_HOME/ddo, else ~/.local/state/ddo, else /tmp/ddo-<uid>/state
//
// Thread-safety: pure functions of their arguments, safe from any thread.
#ifndef DDO_DAEMON_CONFIG_PATHS_H_
#define DDO_DAEMON_CONFIG_PATHS_H_

#include <string>
#include <vector>

#include "daemon/config/environment.h"
#include "ddo/wire/daemon_address.h"

namespace ddo {

// The socket rules live in proto/wire (ddo/wire/daemon_address.h), shared with the clients;
// these take the daemon's UserContext.
SocketUser SocketUserOf(const UserContext& user);

// The socket ddod binds when --socket is not given.
std::string DefaultSocketPath(const UserContext& user);

// The sockets a client tries, in order, when DDO_DAEMON does not name one: the user's own
// daemon first, then the system service.
std::vector<std::string> DefaultSocketCandidates(const UserContext& user);

// ddod's state directory when --state-dir is not given.
std::string DefaultStateDir(const UserContext& user);

}  // namespace ddo

#endif  // DDO_DAEMON_CONFIG_PATHS_H_
