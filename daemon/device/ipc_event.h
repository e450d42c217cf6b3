// File: daemon/device/ipc_event.h
//
// A CUDA event another process can wait on (CUDA builds only): created with
// cudaEventInterprocess | cudaEventDisableTiming, as interprocess events must be, and exported
// as a cudaIpcEventHandle_t (64 opaque bytes; torch.cuda.Event.from_ipc_handle opens it).
// A waiter's cudaStreamWaitEvent waits for the work recorded before the wait was enqueued.
// Move-only; destroyed on its device.
//
// Thread-safety: one thread at a time records or queries an IpcEvent (its session's copy
// worker, or the thread that opens and closes the session).
#ifndef DDO_DAEMON_DEVICE_IPC_EVENT_H_
#define DDO_DAEMON_DEVICE_IPC_EVENT_H_

#include <cuda_runtime_api.h>

#include <string>

#include "absl/status/statusor.h"
#include "daemon/device/cuda_stream.h"

namespace ddo {

class IpcEvent {
 public:
  static absl::StatusOr<IpcEvent> Create(int ordinal);
  // An event another process exported.
  static absl::StatusOr<IpcEvent> Open(int ordinal, const std::string& handle);

  IpcEvent(IpcEvent&& other) noexcept;
  IpcEvent& operator=(IpcEvent&&) = delete;
  IpcEvent(const IpcEvent&) = delete;
  IpcEvent& operator=(const IpcEvent&) = delete;
  ~IpcEvent();

  absl::StatusOr<std::string> ExportIpcHandle() const;
  absl::Status Record(const CudaStream& stream);
  // Makes `stream` wait for the work this event has recorded.
  absl::Status BlockStream(const CudaStream& stream) const;
  // True when everything recorded has finished.
  absl::StatusOr<bool> Done() const;

 private:
  IpcEvent(int ordinal, cudaEvent_t event) : ordinal_(ordinal), event_(event) {}

  int ordinal_ = -1;
  cudaEvent_t event_ = nullptr;
};

}  // namespace ddo

#endif  // DDO_DAEMON_DEVICE_IPC_EVENT_H_
