// File: daemon/stream/session_directory.h
//
// The one place the service asks about sessions, whichever registry holds them: a host attach
// lives in the ComponentStore, a streaming session in StreamSessions as well (the two share one
// id). It ends everything a lease holds, detaches a session where it lives (after checking its
// owner), and lists sessions with their streaming state, as plain structs (the service turns
// them into protos).
//
// Thread-safety: as thread-safe as the registries it joins (all of them are).
#ifndef DDO_DAEMON_STREAM_SESSION_DIRECTORY_H_
#define DDO_DAEMON_STREAM_SESSION_DIRECTORY_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "daemon/identity/caller.h"
#include "daemon/session/lease_registry.h"
#include "daemon/store/component_store.h"
#include "daemon/stream/stream_sessions.h"

namespace ddo {

// A session as a caller may see it.
struct SessionView {
  SessionSnapshot host;                   // every session is a host session
  std::optional<StreamSessionInfo> stream;  // set for a streaming session
  int64_t client_pid = 0;                 // of its lease (0 when the lease is gone)
};

class SessionDirectory {
 public:
  SessionDirectory(LeaseRegistry& leases, ComponentStore& store, StreamSessions& streams)
      : leases_(leases), store_(store), streams_(streams) {}

  // Ends what `lease_id` holds: its streaming sessions, then its host sessions and uploads.
  // The lease itself is closed by whoever held it open (Connect).
  void ReleaseLease(const std::string& lease_id);

  // Detaches `session_id` for `caller`: NOT_FOUND or PERMISSION_DENIED (not theirs) from the
  // store's owner check; a streaming session closes its stream, a host attach its view.
  absl::Status Detach(const std::string& session_id, const Caller& caller);

  // The leases `caller` may see (an administrator sees all).
  std::vector<Lease> LeasesOf(const Caller& caller) const;
  // The sessions `caller` may see (an administrator sees all), each with its streaming state.
  std::vector<SessionView> SessionsOf(const Caller& caller) const;

 private:
  LeaseRegistry& leases_;
  ComponentStore& store_;
  StreamSessions& streams_;
};

}  // namespace ddo

#endif  // DDO_DAEMON_STREAM_SESSION_DIRECTORY_H_
