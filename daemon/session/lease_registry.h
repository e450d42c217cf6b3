// File: daemon/session/lease_registry.h
//
// Leases: one per connected client, held for as long as the client keeps its Connect stream
// open. When the stream ends (the client exits, is killed, or its connection drops), the lease
// is closed and everything it owned is released. At shutdown every lease is told first.
//
// Thread-safety: all methods may be called from any thread; state is guarded by mu_.
#ifndef DDO_DAEMON_SESSION_LEASE_REGISTRY_H_
#define DDO_DAEMON_SESSION_LEASE_REGISTRY_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/identity/caller.h"

namespace ddo {

struct Lease {
  std::string id;  // 128 random bits, hex: unguessable by other local users
  int64_t client_pid = 0;  // the caller's pid as the kernel reported it
  std::string client_name;  // as the client said, escaped and bounded
  absl::Time connected;
  Caller caller;
};

struct LeaseLimits {
  size_t per_uid = 32;  // admins (root, ddod's own user) are bound only by the total
  // Every lease holds one of gRPC's threads (its Connect stream): the rest serve calls.
  size_t in_all = 384;
};

class LeaseRegistry {
 public:
  explicit LeaseRegistry(LeaseLimits limits = {}) : limits_(limits) {}
  LeaseRegistry(const LeaseRegistry&) = delete;
  LeaseRegistry& operator=(const LeaseRegistry&) = delete;

  // Opens a lease for `caller`. UNAVAILABLE once shutdown has begun; RESOURCE_EXHAUSTED
  // naming the limit when the caller's uid, or everyone together, holds too many.
  absl::StatusOr<Lease> Open(const Caller& caller, std::string client_name);

  // The open lease with this id; FAILED_PRECONDITION naming the problem otherwise.
  absl::StatusOr<Lease> Find(const std::string& id) const;
  // The same, and PERMISSION_DENIED unless `caller` runs as the uid that opened the lease.
  absl::StatusOr<Lease> FindFor(const std::string& id, const Caller& caller) const;

  // Closes a lease. Closing an unknown id does nothing.
  void Close(const std::string& id);

  // Waits up to `timeout` for shutdown to begin; returns true if it has.
  bool WaitForShutdown(absl::Duration timeout) const;

  // From now on Open fails and WaitForShutdown returns true. `reason` is what leases are told.
  void BeginShutdown(const std::string& reason);
  std::string shutdown_reason() const;

  bool shutting_down() const;
  std::vector<Lease> List() const;
  size_t size() const;

 private:
  const LeaseLimits limits_;
  mutable absl::Mutex mu_;
  std::map<std::string, Lease> leases_ ABSL_GUARDED_BY(mu_);
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
  std::string shutdown_reason_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ddo

#endif  // DDO_DAEMON_SESSION_LEASE_REGISTRY_H_
