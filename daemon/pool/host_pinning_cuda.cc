#include <cuda_runtime_api.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "daemon/common/logging.h"
#include "daemon/pool/host_pinning.h"

namespace ddo {

bool HostPinningAvailable() {
  int count = 0;
  const bool usable = cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
  cudaGetLastError();  // clear a sticky "no driver" error
  return usable;
}

absl::Status PinHostRange(char* data, uint64_t size) {
  for (uint64_t offset = 0; offset < size; offset += kMaxPinChunkBytes) {
    const uint64_t chunk = std::min(kMaxPinChunkBytes, size - offset);
    const cudaError_t error = cudaHostRegister(data + offset, chunk, cudaHostRegisterPortable);
    if (error != cudaSuccess) {
      cudaGetLastError();
      UnpinHostRange(data, offset);
      return absl::ResourceExhaustedError(absl::StrCat(
          "cudaHostRegister of ", chunk, " bytes at offset ", offset, " failed: ",
          cudaGetErrorName(error), " (", cudaGetErrorString(error),
          "); is RLIMIT_MEMLOCK too low? (ulimit -l, LimitMEMLOCK= in systemd)"));
    }
  }
  return absl::OkStatus();
}

void UnpinHostRange(char* data, uint64_t size) {
  for (uint64_t offset = 0; offset < size; offset += kMaxPinChunkBytes) {
    if (cudaError_t error = cudaHostUnregister(data + offset); error != cudaSuccess) {
      cudaGetLastError();
      Logger("pool")->warn("cudaHostUnregister at offset {} failed: {}", offset,
                           cudaGetErrorName(error));
    }
  }
}

}  // namespace ddo
