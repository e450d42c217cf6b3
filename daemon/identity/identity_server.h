// File: daemon/identity/identity_server.h
//
// The identity socket (docs/security.md): a SOCK_SEQPACKET Unix socket beside ddod's gRPC
// socket where each caller's uid, gid and pid are read from the kernel (SO_PEERCRED) when it
// connects. HELLO gives the connection a token in the CallerRegistry; FILE keeps a descriptor
// the caller opened; OPEN hands the caller a descriptor of a segment it was granted. The token
// and all it holds end when the connection closes.
//
// One thread serves every connection (poll, non-blocking I/O, one packet per request), so a
// slow or hostile client can delay nobody: a client that does not read its answers is dropped.
//
// Connections are bounded (docs/security.md §5): per uid, in all (connection_table.h) and by
// the descriptor reserve (descriptor_reserve.h). One over a limit is closed at once, before
// it can hold a slot; its client sees the connection end before HELLO's answer. One that has
// not said HELLO within `hello_deadline` is dropped, so idle connections cannot hold slots.
// Accept failing for want of descriptors is waited out with a short back-off, and repeated
// log lines are throttled (log_throttle.h).
//
// Thread-safety: Start and Stop from one thread; the serving thread owns the connections.
#ifndef DDO_DAEMON_IDENTITY_IDENTITY_SERVER_H_
#define DDO_DAEMON_IDENTITY_IDENTITY_SERVER_H_

#include <sys/types.h>

#include <map>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "daemon/common/connection_table.h"
#include "daemon/common/descriptor_reserve.h"
#include "daemon/common/log_throttle.h"
#include "daemon/identity/caller.h"
#include "daemon/identity/caller_registry.h"
#include "ddo/wire/unique_fd.h"

namespace ddo {

struct IdentityServerOptions {
  std::string socket_path;
  // Owner-only (0600) when empty; else this group may connect too (0660).
  std::string socket_group;
  ConnectionLimits limits;
  size_t descriptor_reserve = 256;
  absl::Duration hello_deadline = absl::Seconds(5);
};

class IdentityServer {
 public:
  // Binds the socket (replacing a stale socket file, nothing else) and starts serving; or,
  // given `inherited_listener` (socket activation), serves on that listening socket and leaves
  // its file, mode and group alone: they are systemd's.
  static absl::StatusOr<std::unique_ptr<IdentityServer>> Start(
      IdentityServerOptions options, CallerRegistry& callers,
      UniqueFd inherited_listener = UniqueFd());
  IdentityServer(const IdentityServer&) = delete;
  IdentityServer& operator=(const IdentityServer&) = delete;
  ~IdentityServer();

  // Stops serving, drops every connection (their tokens end) and removes the socket file
  // (unless it was inherited).
  void Stop();

  const std::string& socket_path() const { return options_.socket_path; }

 private:
  struct Connection {
    UniqueFd fd;
    Caller caller;
    std::string token;  // empty until HELLO
    absl::Time hello_by;  // dropped when still without a token then
  };

  IdentityServer(IdentityServerOptions options, CallerRegistry& callers);

  // Creates, binds and opens the socket file (owner-only, or to options_.socket_group).
  absl::Status Bind();
  void Run();
  // Accepts what waits; false when accept ran out of descriptors (the caller backs off).
  bool AcceptAll();
  // Drops the connections past their HELLO deadline; the earliest deadline left.
  absl::Time DropSilent(absl::Time now);
  // Writes the counts of suppressed lines that are due; when the next one will be.
  absl::Time ReportSuppressed(absl::Time now);
  // Reads and answers one packet; false when the connection should be dropped.
  bool Serve(Connection& connection);
  void Drop(int fd);

  const IdentityServerOptions options_;
  CallerRegistry& callers_;
  UniqueFd listener_;
  bool owns_socket_file_ = true;  // false when inherited from systemd
  UniqueFd wake_;  // eventfd: Stop() wakes the poll loop
  // Touched by the serving thread only.
  std::map<int, Connection> connections_;  // by fd
  ConnectionTable table_;
  const DescriptorReserve reserve_;
  // One throttle per kind of line, so that a flood of one kind hides no other.
  LogThrottle limit_lines_;
  LogThrottle reserve_lines_;
  LogThrottle failed_lines_;
  LogThrottle identified_lines_;
  uint64_t silent_dropped_ = 0;  // since the last line that said so
  absl::Time silent_reported_ = absl::InfinitePast();
  std::thread thread_;
  bool stopped_ = false;
};

}  // namespace ddo

#endif  // DDO_DAEMON_IDENTITY_IDENTITY_SERVER_H_
