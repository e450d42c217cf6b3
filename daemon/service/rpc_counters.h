// File: daemon/service/rpc_counters.h
//
// Per-method counts and latencies of answered RPCs, for GetStats, `ddoctl stats` and
// `ddoctl metrics` (a Prometheus histogram per method: kLatencyBucketsSeconds are the upper
// bounds, the last bucket is +Inf). The lease stream (Connect) lives as long as its client: it
// is counted, not timed.
//
// Thread-safety: all methods may be called from any thread.
#ifndef DDO_DAEMON_SERVICE_RPC_COUNTERS_H_
#define DDO_DAEMON_SERVICE_RPC_COUNTERS_H_

#include <array>
#include <cstdint>
#include <map>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace ddo {

inline constexpr std::array<double, 10> kLatencyBucketsSeconds = {
    0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 30};

class RpcCounters {
 public:
  struct Count {
    uint64_t ok = 0;
    uint64_t failed = 0;
    // Timed calls: how many, their total seconds, and how many took at most each bound
    // (cumulative, as Prometheus wants them; the +Inf bucket is `timed`).
    uint64_t timed = 0;
    double seconds = 0;
    std::array<uint64_t, kLatencyBucketsSeconds.size()> at_most{};
  };

  // `duration`: how long the call took; absl::InfiniteDuration() for an untimed one.
  void Record(const std::string& method, bool ok,
              absl::Duration duration = absl::InfiniteDuration());
  std::map<std::string, Count> Snapshot() const;

 private:
  mutable absl::Mutex mu_;
  std::map<std::string, Count> counts_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ddo

#endif  // DDO_DAEMON_SERVICE_RPC_COUNTERS_H_
