#include "daemon/device/ipc_memory.h"

#include <cuda_runtime_api.h>

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "daemon/common/status_macros.h"
#include "daemon/device/cuda_check.h"
#include "daemon/device/device_guard.h"

namespace ddo {

absl::StatusOr<IpcMemory> IpcMemory::Open(int ordinal, const std::string& handle) {
  cudaIpcMemHandle_t raw{};
  if (handle.size() != sizeof(raw)) {
    return absl::InvalidArgumentError(absl::StrCat("an IPC memory handle has ", sizeof(raw),
                                                   " bytes, not ", handle.size()));
  }
  std::memcpy(&raw, handle.data(), sizeof(raw));
  DDO_ASSIGN_OR_RETURN(DeviceGuard guard, DeviceGuard::Create(ordinal));
  void* data = nullptr;
  DDO_CUDA_RETURN_IF_ERROR(cudaIpcOpenMemHandle(&data, raw, cudaIpcMemLazyEnablePeerAccess),
                           "cudaIpcOpenMemHandle");
  return IpcMemory(ordinal, data);
}

IpcMemory::IpcMemory(IpcMemory&& other) noexcept
    : ordinal_(other.ordinal_), data_(std::exchange(other.data_, nullptr)) {}

IpcMemory::~IpcMemory() {
  if (data_ == nullptr) {
    return;
  }
  if (auto guard = DeviceGuard::Create(ordinal_); guard.ok()) {
    WarnIfCudaError(cudaIpcCloseMemHandle(data_), "cudaIpcCloseMemHandle");
  }
}

}  // namespace ddo
