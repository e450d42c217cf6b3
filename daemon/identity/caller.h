// File: daemon/identity/caller.h
//
// Who is calling: the uid, gid and pid the kernel reported for the caller's identity-socket
// connection (SO_PEERCRED; on Windows, the identity pipe's SID by ddod's numbering:
// ddo/os/user_ids.h), never what a request says. `admin` callers (root, or ddod's own
// user) may act on every user's components; everyone else only on their own and on those
// they proved they may read (docs/security.md).
//
// Thread-safety: a plain value.
#ifndef DDO_DAEMON_IDENTITY_CALLER_H_
#define DDO_DAEMON_IDENTITY_CALLER_H_

#include <cstdint>
#include <string>

#include "ddo/os/user_ids.h"

namespace ddo {

struct Caller {
  uid_t uid = static_cast<uid_t>(-1);
  gid_t gid = static_cast<gid_t>(-1);
  pid_t pid = 0;
  bool admin = false;  // root or ddod's own uid

  // "uid 1000 pid 4242", for logs and messages.
  std::string Describe() const;
};

// The caller as the kernel sees it; admin when `uid` is 0 or ddod's effective uid.
Caller CallerFromCredentials(uid_t uid, gid_t gid, pid_t pid);

// ddod itself (its own uid and pid), for work ddod does on its own behalf and in tests.
Caller DaemonCaller();

}  // namespace ddo

#endif  // DDO_DAEMON_IDENTITY_CALLER_H_
