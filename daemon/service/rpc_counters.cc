#include "daemon/service/rpc_counters.h"

namespace ddo {

void RpcCounters::Record(const std::string& method, bool ok, absl::Duration duration) {
  absl::MutexLock lock(&mu_);
  Count& count = counts_[method];
  (ok ? count.ok : count.failed) += 1;
  if (duration == absl::InfiniteDuration()) return;
  const double seconds = absl::ToDoubleSeconds(duration);
  count.timed += 1;
  count.seconds += seconds;
  for (size_t i = 0; i < kLatencyBucketsSeconds.size(); ++i) {
    if (seconds <= kLatencyBucketsSeconds[i]) count.at_most[i] += 1;
  }
}

std::map<std::string, RpcCounters::Count> RpcCounters::Snapshot() const {
  absl::MutexLock lock(&mu_);
  return counts_;
}

}  // namespace ddo
