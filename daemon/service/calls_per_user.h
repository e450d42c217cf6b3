// File: daemon/service/calls_per_user.h
//
// How many calls each user (uid) has running now, and a bound on it: every call holds one of
// gRPC's server threads, so one user's many slow calls (attaches filling slabs, loads) could
// otherwise leave every other user "Server Threadpool Exhausted". Leases, which hold a thread
// for a client's whole life, are bounded by the LeaseRegistry instead and are not counted here.
//
// Thread-safety: all methods may be called from any thread; state is guarded by mu_.
#ifndef DDO_DAEMON_SERVICE_CALLS_PER_USER_H_
#define DDO_DAEMON_SERVICE_CALLS_PER_USER_H_

#include <sys/types.h>

#include <cstddef>
#include <map>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace ddo {

class CallsPerUser {
 public:
  explicit CallsPerUser(size_t limit) : limit_(limit) {}
  CallsPerUser(const CallsPerUser&) = delete;
  CallsPerUser& operator=(const CallsPerUser&) = delete;

  // Counts a call of `uid`; RESOURCE_EXHAUSTED naming the limit (and counting nothing) when
  // that user already has `limit` calls running and `bounded` is true (admins are not).
  absl::Status Enter(uid_t uid, bool bounded);
  // Ends a call Enter counted.
  void Leave(uid_t uid);

  size_t running(uid_t uid) const;

 private:
  const size_t limit_;
  mutable absl::Mutex mu_;
  std::map<uid_t, size_t> running_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ddo

#endif  // DDO_DAEMON_SERVICE_CALLS_PER_USER_H_
