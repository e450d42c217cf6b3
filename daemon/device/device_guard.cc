#include "daemon/device/device_guard.h"

#include <cuda_runtime_api.h>

#include "absl/strings/str_cat.h"
#include "daemon/device/cuda_check.h"

namespace ddo {

absl::StatusOr<DeviceGuard> DeviceGuard::Create(int ordinal) {
  int previous = 0;
  DDO_CUDA_RETURN_IF_ERROR(cudaGetDevice(&previous), "cudaGetDevice");
  DDO_CUDA_RETURN_IF_ERROR(cudaSetDevice(ordinal), absl::StrCat("cudaSetDevice(", ordinal, ")"));
  return DeviceGuard(previous);
}

DeviceGuard::~DeviceGuard() {
  if (previous_ >= 0) {
    WarnIfCudaError(cudaSetDevice(previous_), "restore the current device");
  }
}

}  // namespace ddo
