// The host-only build: there is no device to copy to.
#include "daemon/device/h2d_bandwidth.h"

namespace ddo {

absl::StatusOr<double> MeasurePinnedH2DGbps(int, uint64_t, int) {
  return absl::FailedPreconditionError("ddod was built without CUDA: no device bandwidth");
}

}  // namespace ddo
