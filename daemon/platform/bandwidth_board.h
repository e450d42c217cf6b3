// File: daemon/platform/bandwidth_board.h
//
// The pinned host-to-device bandwidth of each device, measured once in the background after
// ddod starts (so that starting stays fast) and read by GetInfo and the planner. A device not
// measured yet, or that could not be, reads 0.
//
// Thread-safety: all methods may be called from any thread; guarded by mu_.
#ifndef DDO_DAEMON_PLATFORM_BANDWIDTH_BOARD_H_
#define DDO_DAEMON_PLATFORM_BANDWIDTH_BOARD_H_

#include <map>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace ddo {

class BandwidthBoard {
 public:
  void Set(int ordinal, double gbps) {
    absl::MutexLock lock(&mu_);
    gbps_[ordinal] = gbps;
  }
  double Get(int ordinal) const {
    absl::MutexLock lock(&mu_);
    auto it = gbps_.find(ordinal);
    return it == gbps_.end() ? 0.0 : it->second;
  }

 private:
  mutable absl::Mutex mu_;
  std::map<int, double> gbps_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ddo

#endif  // DDO_DAEMON_PLATFORM_BANDWIDTH_BOARD_H_
