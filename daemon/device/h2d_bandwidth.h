// File: daemon/device/h2d_bandwidth.h
//
// Pinned host-to-device copy bandwidth of a device, measured the way ddod copies: from
// page-locked host memory on a non-blocking stream. The planner's bound S/B and the benchmarks'
// ratios use it. Without CUDA there is nothing to measure.
//
// Thread-safety: any thread (ddod calls it on a background thread after start); each call
// allocates its own pinned buffer, device buffer and stream.
#ifndef DDO_DAEMON_DEVICE_H2D_BANDWIDTH_H_
#define DDO_DAEMON_DEVICE_H2D_BANDWIDTH_H_

#include <cstdint>

#include "absl/status/statusor.h"

namespace ddo {

// GB/s (1e9 bytes per second): the best of `repeats` timed copies of `bytes`, after a warm-up.
absl::StatusOr<double> MeasurePinnedH2DGbps(int ordinal, uint64_t bytes = 256ull << 20,
                                            int repeats = 5);

}  // namespace ddo

#endif  // DDO_DAEMON_DEVICE_H2D_BANDWIDTH_H_
