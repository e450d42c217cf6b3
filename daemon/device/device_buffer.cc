#include "daemon/device/device_buffer.h"

#include <cuda_runtime_api.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "daemon/common/status_macros.h"
#include "daemon/device/cuda_check.h"
#include "daemon/device/device_guard.h"

namespace ddo {

absl::StatusOr<DeviceBuffer> DeviceBuffer::Allocate(int ordinal, uint64_t bytes) {
  DDO_ASSIGN_OR_RETURN(DeviceGuard guard, DeviceGuard::Create(ordinal));
  void* data = nullptr;
  DDO_CUDA_RETURN_IF_ERROR(cudaMalloc(&data, bytes),
                           absl::StrCat("cudaMalloc of ", bytes, " bytes on device ", ordinal));
  return DeviceBuffer(ordinal, data, bytes);
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : ordinal_(other.ordinal_),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    Release();
    ordinal_ = other.ordinal_;
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() { Release(); }

void DeviceBuffer::Release() {
  if (data_ == nullptr) {
    return;
  }
  // Freed on its own device, so that no other device's context is created for it.
  if (auto guard = DeviceGuard::Create(ordinal_); guard.ok()) {
    WarnIfCudaError(cudaFree(data_), "cudaFree");
  }
  data_ = nullptr;
}

absl::StatusOr<std::string> DeviceBuffer::ExportIpcHandle() const {
  cudaIpcMemHandle_t handle{};
  DDO_CUDA_RETURN_IF_ERROR(cudaIpcGetMemHandle(&handle, data_), "cudaIpcGetMemHandle");
  return std::string(reinterpret_cast<const char*>(&handle), sizeof(handle));
}

}  // namespace ddo
