// File: daemon/session/session_registry.h
//
// Every session of this ddod under one id, host attaches and streaming sessions alike: the
// lease and uid that hold it, the component it keeps in the pool, and the device it streams to
// ("" for a host attach). The store adds a session when it pins a component for a lease and
// removes it when it lets the component go; the stream layer marks the sessions it streams.
// Owners are checked here (a session is its uid's, or an admin's), and so is the limit of
// sessions per uid.
//
// Thread-safety: every method may be called from any thread; mu_ guards the map. The store
// calls in under its own lock; the registry never calls out.
#ifndef DDO_DAEMON_SESSION_SESSION_REGISTRY_H_
#define DDO_DAEMON_SESSION_SESSION_REGISTRY_H_

#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "daemon/identity/caller.h"
#include "daemon/session/lease_registry.h"

namespace ddo {

struct SessionRecord {
  std::string id;  // 128 random bits, hex: a capability of its holder
  std::string lease_id;
  std::string cache_key;
  uid_t uid = 0;
  std::string device;  // "" for a host attach; "cpu", "cpu:<n>" or a GPU UUID when streaming
};

class SessionRegistry {
 public:
  // `max_per_uid`: sessions one uid may hold at once (admins are not bound).
  explicit SessionRegistry(size_t max_per_uid = 256) : max_per_uid_(max_per_uid) {}
  SessionRegistry(const SessionRegistry&) = delete;
  SessionRegistry& operator=(const SessionRegistry&) = delete;

  // A new host session of `lease` on `cache_key`; returns its id. ResourceExhausted, naming
  // the limit, when the lease's uid (not an admin) holds max_per_uid sessions already.
  absl::StatusOr<std::string> Add(const Lease& lease, const std::string& cache_key);

  // The session `id` as `caller` may act on it: NotFound (named by a short prefix of the id)
  // or PermissionDenied when it is another user's and `caller` is no admin.
  absl::StatusOr<SessionRecord> FindFor(const std::string& id, const Caller& caller) const;

  // Records that session `id` now streams to `device`. NotFound when it is gone.
  absl::Status MarkStreaming(const std::string& id, const std::string& device);

  // Removes the session (nothing when it is gone) and returns it.
  std::optional<SessionRecord> Remove(const std::string& id);
  // Removes and returns every session of `lease_id`.
  std::vector<SessionRecord> RemoveLease(const std::string& lease_id);

  std::vector<SessionRecord> List() const;
  size_t size() const;

 private:
  const size_t max_per_uid_;
  mutable absl::Mutex mu_;
  std::map<std::string, SessionRecord> sessions_ ABSL_GUARDED_BY(mu_);  // by id
  std::map<uid_t, size_t> per_uid_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ddo

#endif  // DDO_DAEMON_SESSION_SESSION_REGISTRY_H_
