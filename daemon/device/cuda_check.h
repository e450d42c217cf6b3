// File: daemon/device/cuda_check.h
//
// The one place where CUDA runtime errors become absl::Status (CUDA builds only). The message
// names the operation, the error's name and its description. Sticky errors are cleared so a
// failed call does not poison the next one on this thread.
//
//   DDO_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(...), "copy unit 3 to slot 1");
//
// Thread-safety: any thread; each call reads and clears only the calling thread's CUDA error.
#ifndef DDO_DAEMON_DEVICE_CUDA_CHECK_H_
#define DDO_DAEMON_DEVICE_CUDA_CHECK_H_

#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace ddo {

// OK for cudaSuccess; otherwise out-of-memory is RESOURCE_EXHAUSTED, a missing or broken
// device UNAVAILABLE, bad arguments INVALID_ARGUMENT, anything else INTERNAL.
absl::Status CudaStatus(cudaError_t error, absl::string_view what);

// For destructors, which must not fail: logs a warning when `error` is not cudaSuccess.
void WarnIfCudaError(cudaError_t error, absl::string_view what);

}  // namespace ddo

#define DDO_CUDA_RETURN_IF_ERROR(call, what)                                  \
  do {                                                                        \
    if (absl::Status ddo_cuda_status_ = ::ddo::CudaStatus((call), (what));    \
        !ddo_cuda_status_.ok()) {                                             \
      return ddo_cuda_status_;                                                \
    }                                                                         \
  } while (false)

#endif  // DDO_DAEMON_DEVICE_CUDA_CHECK_H_
