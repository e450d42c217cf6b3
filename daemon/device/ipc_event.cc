#include "daemon/device/ipc_event.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "daemon/common/status_macros.h"
#include "daemon/device/cuda_check.h"
#include "daemon/device/device_guard.h"

namespace ddo {

absl::StatusOr<IpcEvent> IpcEvent::Create(int ordinal) {
  DDO_ASSIGN_OR_RETURN(DeviceGuard guard, DeviceGuard::Create(ordinal));
  cudaEvent_t event = nullptr;
  DDO_CUDA_RETURN_IF_ERROR(
      cudaEventCreateWithFlags(&event, cudaEventInterprocess | cudaEventDisableTiming),
      absl::StrCat("create an interprocess event on device ", ordinal));
  return IpcEvent(ordinal, event);
}

absl::StatusOr<IpcEvent> IpcEvent::Open(int ordinal, const std::string& handle) {
  cudaIpcEventHandle_t raw{};
  if (handle.size() != sizeof(raw)) {
    return absl::InvalidArgumentError(absl::StrCat("an IPC event handle has ", sizeof(raw),
                                                   " bytes, not ", handle.size()));
  }
  std::memcpy(&raw, handle.data(), sizeof(raw));
  DDO_ASSIGN_OR_RETURN(DeviceGuard guard, DeviceGuard::Create(ordinal));
  cudaEvent_t event = nullptr;
  DDO_CUDA_RETURN_IF_ERROR(cudaIpcOpenEventHandle(&event, raw), "cudaIpcOpenEventHandle");
  return IpcEvent(ordinal, event);
}

IpcEvent::IpcEvent(IpcEvent&& other) noexcept
    : ordinal_(other.ordinal_), event_(std::exchange(other.event_, nullptr)) {}

IpcEvent::~IpcEvent() {
  if (event_ == nullptr) {
    return;
  }
  if (auto guard = DeviceGuard::Create(ordinal_); guard.ok()) {
    WarnIfCudaError(cudaEventDestroy(event_), "cudaEventDestroy");
  }
}

absl::StatusOr<std::string> IpcEvent::ExportIpcHandle() const {
  cudaIpcEventHandle_t handle{};
  DDO_CUDA_RETURN_IF_ERROR(cudaIpcGetEventHandle(&handle, event_), "cudaIpcGetEventHandle");
  return std::string(reinterpret_cast<const char*>(&handle), sizeof(handle));
}

absl::Status IpcEvent::Record(const CudaStream& stream) {
  DDO_CUDA_RETURN_IF_ERROR(cudaEventRecord(event_, stream.get()), "cudaEventRecord");
  return absl::OkStatus();
}

absl::Status IpcEvent::BlockStream(const CudaStream& stream) const {
  DDO_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(stream.get(), event_, 0), "cudaStreamWaitEvent");
  return absl::OkStatus();
}

absl::StatusOr<bool> IpcEvent::Done() const {
  const cudaError_t state = cudaEventQuery(event_);
  if (state == cudaErrorNotReady) {
    cudaGetLastError();
    return false;
  }
  DDO_CUDA_RETURN_IF_ERROR(state, "cudaEventQuery");
  return true;
}

}  // namespace ddo
