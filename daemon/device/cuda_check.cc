#include "daemon/device/cuda_check.h"

#include "absl/strings/str_cat.h"
#include "daemon/common/logging.h"

namespace ddo {

absl::Status CudaStatus(cudaError_t error, absl::string_view what) {
  if (error == cudaSuccess) {
    return absl::OkStatus();
  }
  cudaGetLastError();  // clear a sticky error for the next call on this thread
  const std::string message =
      absl::StrCat(what, ": ", cudaGetErrorName(error), " (", cudaGetErrorString(error), ")");
  switch (error) {
    case cudaErrorMemoryAllocation:
      return absl::ResourceExhaustedError(message);
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorDevicesUnavailable:
    case cudaErrorDeviceUninitialized:
      return absl::UnavailableError(message);
    case cudaErrorInvalidValue:
    case cudaErrorInvalidDevice:
    case cudaErrorInvalidResourceHandle:
      return absl::InvalidArgumentError(message);
    default:
      return absl::InternalError(message);
  }
}

void WarnIfCudaError(cudaError_t error, absl::string_view what) {
  if (error != cudaSuccess) {
    cudaGetLastError();
    Logger("device")->warn("{}: {}", what, cudaGetErrorName(error));
  }
}

}  // namespace ddo
