// File: proto/wire/include/ddo/wire/identity_client.h
//
// The client's end of the identity socket (docs/security.md), for ddoctl and C++ runners:
// checks that the daemon runs as a user the client trusts (the client's own, root, or the
// service user), proves who the client is (HELLO) and keeps the token, passes files (FILE)
// and opens granted segments (OPEN).
//
// Thread-safety: thread-safe; requests on one link take turns (a mutex), since each answer
// must pair with its request.
#ifndef DDO_WIRE_IDENTITY_CLIENT_H_
#define DDO_WIRE_IDENTITY_CLIENT_H_

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>

#include "absl/status/statusor.h"
#include "ddo/wire/daemon_checks.h"
#include "ddo/wire/seqpacket.h"
#include "ddo/wire/unique_fd.h"

namespace ddo {

class IdentityLink {
 public:
  // PERMISSION_DENIED (naming the uid found and the uids accepted) when the process that
  // listens on `path`, or the one that answers HELLO there (they differ under socket
  // activation), runs as anyone else; UNAVAILABLE when nothing answers there.
  // `timeout_ms` > 0 bounds each send and answer; a late answer breaks the link (it no longer
  // pairs requests with answers), as does a truncated one.
  static absl::StatusOr<IdentityLink> Connect(const std::string& path,
                                              const std::set<uid_t>& trusted,
                                              int timeout_ms = 0);

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

  // On the heap so that a link can be moved (out of Connect).
  std::unique_ptr<std::mutex> mutex_ = std::make_unique<std::mutex>();
  UniqueFd socket_;  // guarded by *mutex_; closed once the link broke
  // The link broke because ddod closed it (guarded by *mutex_): before HELLO's answer, a
  // refusal by one of ddod's connection limits.
  bool ended_by_peer_ = false;
  std::string token_;
  uid_t daemon_uid_ = 0;
};

}  // namespace ddo

#endif  // DDO_WIRE_IDENTITY_CLIENT_H_
