// File: daemon/common/connection_table.h
//
// Who holds the connections of one of ddod's sockets, and whether one more may come in: at
// most `per_uid` connections for each uid, and `in_all` in all (docs/security.md §5). The
// accept loops (connection_gate.h for gRPC, identity_server.h) ask before they keep a
// connection and close it at once when the answer is no.
//
// Admins (root, ddod's own uid) count like everyone, but the total does not refuse them, only
// their own per-uid limit (and the descriptor reserve): a daemon that other users filled still
// lets `ddoctl` in.
//
// Connections are known by descriptor number and socket inode. Where the table's owner closes
// them itself (the identity socket) it calls Release. Where another owner closes them unseen
// (gRPC, once handed the descriptor), the table is given `still_open`, which it asks before it
// refuses anyone: entries whose descriptor was closed, or now names another file, are swept.
//
// Thread-safety: none; used by one accept loop.
#ifndef DDO_DAEMON_COMMON_CONNECTION_TABLE_H_
#define DDO_DAEMON_COMMON_CONNECTION_TABLE_H_

#include <sys/types.h>

#include <cstddef>
#include <functional>
#include <map>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace ddo {

struct ConnectionLimits {
  size_t per_uid = 64;
  size_t in_all = 1024;
};

class ConnectionTable {
 public:
  // Whether the connection recorded as (`fd`, `inode`) is still open.
  using StillOpen = std::function<bool(int fd, ino_t inode)>;

  // The time now (absl::Now, or a test's clock).
  using Clock = std::function<absl::Time()>;

  // A refusal sweeps (asks `still_open` about every connection) at most once per this long:
  // a caller at its limit that connects in a loop costs one accept and one refusal each time,
  // not a thousand fstat calls.
  static constexpr absl::Duration kSweepInterval = absl::Milliseconds(20);

  // `what` names the socket in messages ("gRPC socket", "identity socket").
  ConnectionTable(std::string what, ConnectionLimits limits, StillOpen still_open = nullptr,
                  Clock clock = nullptr);

  // Records connection `fd` of `uid`, or refuses it with RESOURCE_EXHAUSTED naming the limit.
  // A descriptor number already in the table means its earlier connection is gone (the kernel
  // gave the number out again): the new one replaces it. Over a limit, the table first sweeps
  // (at most once per kSweepInterval) and checks again.
  absl::Status Admit(int fd, ino_t inode, uid_t uid, bool admin);

  // Forgets connection `fd` (closed by the table's owner).
  void Release(int fd);

  // Forgets every connection that `still_open` says is gone.
  void Sweep();

  size_t size() const { return connections_.size(); }
  size_t CountOf(uid_t uid) const;
  const ConnectionLimits& limits() const { return limits_; }

 private:
  struct Entry {
    ino_t inode;
    uid_t uid;
  };
  absl::Status Check(uid_t uid, bool admin) const;
  void Erase(std::map<int, Entry>::iterator it);

  const std::string what_;
  const ConnectionLimits limits_;
  const StillOpen still_open_;
  const Clock clock_;
  absl::Time next_sweep_ = absl::InfinitePast();
  std::map<int, Entry> connections_;  // by descriptor number
  std::map<uid_t, size_t> per_uid_;
};

}  // namespace ddo

#endif  // DDO_DAEMON_COMMON_CONNECTION_TABLE_H_
