// File: daemon/service/rpc_counters.h
//
// Per-method counts of answered RPCs, for GetStats and `ddoctl stats`.
//
// Thread-safety: all methods may be called from any thread.
#ifndef DDO_DAEMON_SERVICE_RPC_COUNTERS_H_
#define DDO_DAEMON_SERVICE_RPC_COUNTERS_H_

#include <cstdint>
#include <map>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace ddo {

class RpcCounters {
 public:
  struct Count {
    uint64_t ok = 0;
    uint64_t failed = 0;
  };

  void Record(const std::string& method, bool ok);
  std::map<std::string, Count> Snapshot() const;

 private:
  mutable absl::Mutex mu_;
  std::map<std::string, Count> counts_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ddo

#endif  // DDO_DAEMON_SERVICE_RPC_COUNTERS_H_
