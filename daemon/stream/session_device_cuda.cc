// File: daemon/stream/session_device_cuda.cc
//
// The CUDA backend's ring: cudaMalloc'd on the session's device and exported once over CUDA
// IPC; each session copies on a stream of its own (a runner that stops consuming
// stalls only its own stream); every slot has an interprocess "ready" event (recorded here
// after the copy) and "consumed" event (recorded by the runner after its last kernel reading
// the slot), both created here and exported. Completion is polled on the CPU (cudaEventQuery):
// neither side's stream ever waits on the other process's event.
#include <cuda_runtime_api.h>

#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/common/status_macros.h"
#include "daemon/device/cuda_check.h"
#include "daemon/device/cuda_stream.h"
#include "daemon/device/device_buffer.h"
#include "daemon/device/device_guard.h"
#include "daemon/device/ipc_event.h"
#include "daemon/stream/session_device.h"

namespace ddo {
namespace {

class CudaSessionDevice final : public SessionDevice {
 public:
  CudaSessionDevice(int ordinal, uint64_t ring_bytes, DeviceBuffer ring, CudaStream stream,
                    std::vector<IpcEvent> ready, std::vector<IpcEvent> consumed)
      : ordinal_(ordinal),
        ring_bytes_(ring_bytes),
        ring_(std::move(ring)),
        stream_(std::move(stream)),
        ready_(std::move(ready)),
        consumed_(std::move(consumed)) {}

  absl::Status CopyToRing(uint64_t ring_offset, const void* source, uint64_t bytes) override {
    if (ring_offset + bytes > ring_bytes_) {
      return absl::InternalError(absl::StrCat("ring copy out of range (", ring_offset, " + ", bytes,
                                              " > ", ring_bytes_, ")"));
    }
    DDO_ASSIGN_OR_RETURN(DeviceGuard guard, DeviceGuard::Create(ordinal_));
    return stream_.CopyToDevice(static_cast<char*>(ring_.data()) + ring_offset, source, bytes);
  }

  absl::StatusOr<bool> ConsumedDone(uint32_t slot) override {
    DDO_ASSIGN_OR_RETURN(DeviceGuard guard, DeviceGuard::Create(ordinal_));
    return consumed_[slot].Done();
  }
  absl::StatusOr<bool> ReadyDone(uint32_t slot) override {
    DDO_ASSIGN_OR_RETURN(DeviceGuard guard, DeviceGuard::Create(ordinal_));
    return ready_[slot].Done();
  }
  absl::Status MarkReady(uint32_t slot) override {
    DDO_ASSIGN_OR_RETURN(DeviceGuard guard, DeviceGuard::Create(ordinal_));
    return ready_[slot].Record(stream_);
  }

  absl::Status Drain(absl::Duration timeout) override {
    DDO_ASSIGN_OR_RETURN(DeviceGuard guard, DeviceGuard::Create(ordinal_));
    const absl::Time deadline = absl::Now() + timeout;
    // Polled rather than cudaStreamSynchronize: the stream may wait on an event of a runner
    // that died, and ddod must not hang on it.
    while (true) {
      const cudaError_t state = cudaStreamQuery(stream_.get());
      if (state == cudaSuccess) return absl::OkStatus();
      if (state != cudaErrorNotReady) return CudaStatus(state, "cudaStreamQuery");
      if (absl::Now() >= deadline) {
        return absl::DeadlineExceededError(
            absl::StrCat("the session's copy stream did not drain within ", absl::FormatDuration(timeout)));
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }

  absl::Status Export(DeviceExport* out) const override {
    if (ring_.size() > 0) {
      DDO_ASSIGN_OR_RETURN(out->ring_handle, ring_.ExportIpcHandle());
    }
    for (const IpcEvent& event : ready_) {
      DDO_ASSIGN_OR_RETURN(std::string handle, event.ExportIpcHandle());
      out->ready_event_handles.push_back(std::move(handle));
    }
    for (const IpcEvent& event : consumed_) {
      DDO_ASSIGN_OR_RETURN(std::string handle, event.ExportIpcHandle());
      out->consumed_event_handles.push_back(std::move(handle));
    }
    return absl::OkStatus();
  }

  uint64_t device_bytes() const override { return ring_.size(); }

 private:
  int ordinal_;
  uint64_t ring_bytes_;
  DeviceBuffer ring_;
  CudaStream stream_;
  std::vector<IpcEvent> ready_;
  std::vector<IpcEvent> consumed_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<SessionDevice>> OpenCudaSessionDevice(
    int ordinal, const SessionDeviceSpec& spec) {
  // cudaMalloc of 0 bytes gives no exportable pointer: an empty ring gets a minimal allocation.
  DDO_ASSIGN_OR_RETURN(
      DeviceBuffer ring,
      DeviceBuffer::Allocate(ordinal, std::max<uint64_t>(spec.ring_bytes, 256)));
  DDO_ASSIGN_OR_RETURN(CudaStream stream, CudaStream::Create(ordinal));
  std::vector<IpcEvent> ready, consumed;
  for (uint32_t slot = 0; slot <= spec.ring_slots; ++slot) {
    DDO_ASSIGN_OR_RETURN(IpcEvent ready_event, IpcEvent::Create(ordinal));
    DDO_ASSIGN_OR_RETURN(IpcEvent consumed_event, IpcEvent::Create(ordinal));
    ready.push_back(std::move(ready_event));
    consumed.push_back(std::move(consumed_event));
  }
  return std::unique_ptr<SessionDevice>(new CudaSessionDevice(
      ordinal, spec.ring_bytes, std::move(ring), std::move(stream), std::move(ready),
      std::move(consumed)));
}

}  // namespace ddo
