// File: daemon/identity/identity_client.h
//
// The client's end of the identity socket (docs/security.md), for ddoctl and C++ runners:
// checks that the daemon runs as a user the client trusts (the client's own, root, or the
// service user), proves who the client is (HELLO) and keeps the token, passes files (FILE)
// and opens granted segments (OPEN).
//
// Thread-safety: one thread at a time per link.
#ifndef DDO_DAEMON_IDENTITY_IDENTITY_CLIENT_H_
#define DDO_DAEMON_IDENTITY_IDENTITY_CLIENT_H_

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <set>
#include <string>

#include "absl/status/statusor.h"
#include "daemon/common/unique_fd.h"
#include "daemon/identity/seqpacket.h"

namespace ddo {

// The uids a client accepts as its daemon: its own, root, and the service user (the user
// named by DDO_SERVICE_USER, else "ddo", when such a user exists).
std::set<uid_t> TrustedDaemonUids(const std::string& service_user);

// Before talking to a daemon at `socket_path` (a Unix socket): the socket must be a socket owned
// by a trusted uid, in a directory owned by a trusted uid that nobody else may write to, so
// that no other user can have put it there or swap it. PERMISSION_DENIED saying what is wrong.
absl::Status CheckSocketLocation(const std::string& socket_path, const std::set<uid_t>& trusted);

class IdentityLink {
 public:
  // PERMISSION_DENIED (naming the uid found and the uids accepted) when the process that
  // listens on `path`, or the one that answers HELLO there (they differ under socket
  // activation), runs as anyone else; UNAVAILABLE when nothing answers there.
  static absl::StatusOr<IdentityLink> Connect(const std::string& path,
                                              const std::set<uid_t>& trusted);

  // Every ddo.v1.Ddo call carries this in its "ddo-token" metadata.
  const std::string& token() const { return token_; }
  uid_t daemon_uid() const { return daemon_uid_; }

  // FILE: passes a descriptor; returns its handle for LoadSafetensorsRequest.
  absl::StatusOr<uint64_t> PassFile(const std::string& base_name, int fd);
  // OPEN: a descriptor of a segment ddod granted to this link.
  absl::StatusOr<UniqueFd> OpenSegment(const std::string& shm_name, bool writable);

 private:
  // Sends a request and returns ddod's answer after "OK" ("" for a bare OK); ddod's "ERR"
  // message as FAILED_PRECONDITION.
  // `sender`, when given: the credentials the kernel attached to the answer (SO_PASSCRED).
  absl::StatusOr<std::string> Ask(const std::string& request, int fd, UniqueFd* received,
                                  std::optional<PeerCredentials>* sender = nullptr);

  UniqueFd socket_;
  std::string token_;
  uid_t daemon_uid_ = 0;
};

}  // namespace ddo

#endif  // DDO_DAEMON_IDENTITY_IDENTITY_CLIENT_H_
