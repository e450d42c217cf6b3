#include "daemon/service/rpc_counters.h"

namespace ddo {

void RpcCounters::Record(const std::string& method, bool ok) {
  absl::MutexLock lock(&mu_);
  Count& count = counts_[method];
  (ok ? count.ok : count.failed) += 1;
}

std::map<std::string, RpcCounters::Count> RpcCounters::Snapshot() const {
  absl::MutexLock lock(&mu_);
  return counts_;
}

}  // namespace ddo
