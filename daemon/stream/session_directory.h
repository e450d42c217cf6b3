// File: daemon/stream/session_directory.h
//
// The one place the service asks about sessions. Every session is in the SessionRegistry, by
// one id; a streaming session also has its engine state in StreamSessions, and every session
// keeps its component in the ComponentStore. This ends everything a lease holds, detaches a
// session where it runs (after checking its owner), and lists sessions with their streaming
// state, as plain structs (the service turns them into protos).
//
// Thread-safety: as thread-safe as the objects it uses (all of them are).
#ifndef DDO_DAEMON_STREAM_SESSION_DIRECTORY_H_
#define DDO_DAEMON_STREAM_SESSION_DIRECTORY_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "daemon/identity/caller.h"
#include "daemon/session/lease_registry.h"
#include "daemon/session/session_registry.h"
#include "daemon/store/component_store.h"
#include "daemon/stream/stream_sessions.h"

namespace ddo {

// A session as a caller may see it.
struct SessionView {
  SessionRecord record;
  std::optional<StreamSessionInfo> stream;  // set for a streaming session
  int64_t client_pid = 0;                   // of its lease (0 when the lease is gone)
};

class SessionDirectory {
 public:
  SessionDirectory(LeaseRegistry& leases, SessionRegistry& sessions, ComponentStore& store,
                   StreamSessions& streams)
      : leases_(leases), sessions_(sessions), store_(store), streams_(streams) {}

  // Ends what `lease_id` holds: its streaming sessions, then its host sessions and uploads.
  // The lease itself is closed by whoever held it open (Connect).
  void ReleaseLease(const std::string& lease_id);

  // Detaches `session_id` for `caller`: NOT_FOUND or PERMISSION_DENIED (not theirs) from the
  // registry; a streaming session closes its stream, a host attach its view.
  absl::Status Detach(const std::string& session_id, const Caller& caller);

  // The unit order of `caller`'s streaming session (StreamSessions::SetSchedule); returns the
  // cycle length. NOT_FOUND or PERMISSION_DENIED from the registry, NOT_FOUND for a host
  // attach.
  absl::StatusOr<uint32_t> SetSchedule(const std::string& session_id, const Caller& caller,
                                       std::vector<uint32_t> schedule, WeightRows rows = {});

  // The leases `caller` may see (an administrator sees all).
  std::vector<Lease> LeasesOf(const Caller& caller) const;
  // The sessions `caller` may see (an administrator sees all), each with its streaming state.
  std::vector<SessionView> SessionsOf(const Caller& caller) const;

 private:
  LeaseRegistry& leases_;
  SessionRegistry& sessions_;
  ComponentStore& store_;
  StreamSessions& streams_;
};

}  // namespace ddo

#endif  // DDO_DAEMON_STREAM_SESSION_DIRECTORY_H_
