// File: daemon/stream/session_device_cuda_none.cc
//
// Builds without CUDA (-DDDO_WITH_CUDA=OFF): GPU sessions are refused with the reason.
#include "daemon/stream/resident_slab.h"
#include "daemon/stream/session_device.h"

namespace ddo {

absl::StatusOr<std::unique_ptr<SessionDevice>> OpenCudaSessionDevice(int,
                                                                     const SessionDeviceSpec&) {
  return absl::UnavailableError(
      "this ddod was built without CUDA (-DDDO_WITH_CUDA=OFF); use device 'cpu' for the host "
      "backend");
}

absl::StatusOr<std::unique_ptr<ResidentSlab>> OpenCudaSlab(int, uint64_t) {
  return absl::UnavailableError(
      "this ddod was built without CUDA (-DDDO_WITH_CUDA=OFF); use device 'cpu' for the host "
      "backend");
}

}  // namespace ddo
