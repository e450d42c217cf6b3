// File: proto/wire/include/ddo/wire/daemon_checks.h
//
// Whom a client trusts to be its ddod, and the checks made before a word is sent to one
// (docs/security.md, "Finding the daemon"): a Unix socket nobody else could have put there, the
// per-user directory /tmp/ddo-<uid> the user's own, and a TCP port held by a trusted user. The
// Python client makes the same checks (client-python/.../addresses.py).
//
// Thread-safety: functions of their arguments and of the file system.
#ifndef DDO_WIRE_DAEMON_CHECKS_H_
#define DDO_WIRE_DAEMON_CHECKS_H_

#include <sys/types.h>

#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace ddo {

// The uids a client accepts as its daemon: its own, root, and the service user (the user
// named by DDO_SERVICE_USER, else "ddo", when such a user exists).
std::set<uid_t> TrustedDaemonUids(const std::string& service_user);

// TrustedDaemonUids of this process's DDO_SERVICE_USER.
std::set<uid_t> TrustedDaemonUidsFromEnvironment();

// Before talking to a daemon at `socket_path` (a Unix socket): the socket must be a socket owned
// by a trusted uid, in a directory owned by a trusted uid that nobody else may write to, so
// that no other user can have put it there or swap it; in PerUserDirectory(geteuid()) the
// directory must pass CheckPerUserDirectory too. PERMISSION_DENIED saying what is wrong.
absl::Status CheckSocketLocation(const std::string& socket_path, const std::set<uid_t>& trusted);

// `directory` (/tmp/ddo-<uid>, made by whoever came first in a world-writable /tmp) must be a
// directory, not a link, owned by `uid`, mode 0700 exactly. PERMISSION_DENIED otherwise.
absl::Status CheckPerUserDirectory(const std::string& directory, uid_t uid);

// Before a client looks for a socket file at `socket_path`: when the socket lies in
// PerUserDirectory(geteuid()) and that exists, it must pass CheckPerUserDirectory. A squatted
// /tmp/ddo-<uid> is refused even when it holds no socket (yet), so the user learns of it.
absl::Status CheckPerUserDirectoryOf(const std::string& socket_path);

// The kernel's TCP socket tables of this network namespace.
std::vector<std::string> DefaultTcpTables();

// The uids owning a listener on `port` in `tables` (the /proc/net/tcp format); empty when
// nothing listens there, as far as this network namespace shows. A client dials a TCP
// address only once its listeners are known to be trusted: no byte, not even a health check,
// goes to a port another user holds.
std::set<uid_t> TcpListenerOwners(int port,
                                  const std::vector<std::string>& tables = DefaultTcpTables());

// Any local user may listen on a free loopback port: every listener on `port` in `tables`
// (the /proc/net/tcp format) must be owned by a trusted uid, and there must be one.
// PERMISSION_DENIED naming `target`, the port and the owners otherwise.
absl::Status CheckTcpListener(const std::string& target, int port,
                              const std::set<uid_t>& trusted,
                              const std::vector<std::string>& tables = DefaultTcpTables());

}  // namespace ddo

#endif  // DDO_WIRE_DAEMON_CHECKS_H_
