#include "daemon/device/cuda_stream.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "daemon/common/status_macros.h"
#include "daemon/device/cuda_check.h"
#include "daemon/device/device_guard.h"

namespace ddo {

absl::StatusOr<CudaStream> CudaStream::Create(int ordinal) {
  DDO_ASSIGN_OR_RETURN(DeviceGuard guard, DeviceGuard::Create(ordinal));
  cudaStream_t stream = nullptr;
  DDO_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
                           absl::StrCat("create a stream on device ", ordinal));
  return CudaStream(ordinal, stream);
}

CudaStream::CudaStream(CudaStream&& other) noexcept
    : ordinal_(other.ordinal_), stream_(std::exchange(other.stream_, nullptr)) {}

CudaStream::~CudaStream() {
  if (stream_ == nullptr) {
    return;
  }
  if (auto guard = DeviceGuard::Create(ordinal_); guard.ok()) {
    WarnIfCudaError(cudaStreamDestroy(stream_), "cudaStreamDestroy");
  }
}

absl::Status CudaStream::CopyToDevice(void* destination, const void* source, uint64_t bytes) {
  DDO_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(destination, source, bytes, cudaMemcpyHostToDevice, stream_),
      absl::StrCat("copy ", bytes, " bytes to device ", ordinal_));
  return absl::OkStatus();
}

absl::Status CudaStream::Synchronize() {
  DDO_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_),
                           absl::StrCat("synchronise a stream of device ", ordinal_));
  return absl::OkStatus();
}

}  // namespace ddo
