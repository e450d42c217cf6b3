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

namespace ddo {

struct Lease {
  std::string id;  // 128 random bits, hex: unguessable by other local users
  int64_t client_pid = 0;
  std::string client_name;
  absl::Time connected;
};

class LeaseRegistry {
 public:
  LeaseRegistry() = default;
  LeaseRegistry(const LeaseRegistry&) = delete;
  LeaseRegistry& operator=(const LeaseRegistry&) = delete;

  // Opens a lease. Unavailable once shutdown has begun.
  absl::StatusOr<Lease> Open(int64_t client_pid, std::string client_name);

  // The open lease with this id; FAILED_PRECONDITION naming the problem otherwise.
  absl::StatusOr<Lease> Find(const std::string& id) const;

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
  mutable absl::Mutex mu_;
  std::map<std::string, Lease> leases_ ABSL_GUARDED_BY(mu_);
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
  std::string shutdown_reason_ ABSL_GUARDED_BY(mu_);
};

// 128 random bits from the kernel as 32 hex digits.
std::string RandomId();

}  // namespace ddo

#endif  // DDO_DAEMON_SESSION_LEASE_REGISTRY_H_
