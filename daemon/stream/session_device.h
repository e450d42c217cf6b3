// File: daemon/stream/session_device.h
//
// The streaming ring of one session and its ordering primitives, behind one interface with two
// backends (docs/streaming.md): CUDA (a cudaMalloc'd ring exported over CUDA IPC, a copy
// stream of the session's own, interprocess events per slot, a slot being one unit in flight
// wherever it lies in the ring) and host (a shared-memory ring,
// memcpy, no events: both sides are synchronous). The resident slab is its own object
// (resident_slab.h). The streaming engine
// is written once against this interface, so the whole protocol runs in CI on the host
// backend.
//
// Thread-safety: one thread at a time (the device's copy worker, or the opener before the
// session is published).
#ifndef DDO_DAEMON_STREAM_SESSION_DEVICE_H_
#define DDO_DAEMON_STREAM_SESSION_DEVICE_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "daemon/stream/device_export.h"

namespace ddo {

class SessionDevice {
 public:
  virtual ~SessionDevice() = default;

  // Enqueues a copy of host bytes to `ring_offset` in the ring (in order with the copies
  // enqueued before).
  virtual absl::Status CopyToRing(uint64_t ring_offset, const void* source, uint64_t bytes) = 0;
  // True when the GPU work the runner last recorded as "consumed" for `slot` has finished
  // (the ring bytes of the slot's use may be overwritten). Polled on the CPU: a GPU-side wait on another process's
  // event costs a cross-context dependency per unit, measured far slower (docs/streaming.md).
  virtual absl::StatusOr<bool> ConsumedDone(uint32_t slot) = 0;
  // Records "ready" of `slot` after the copies enqueued so far.
  virtual absl::Status MarkReady(uint32_t slot) = 0;
  // True when the copies before the last MarkReady(slot) have finished.
  virtual absl::StatusOr<bool> ReadyDone(uint32_t slot) = 0;
  // Waits for everything enqueued; DeadlineExceeded after `timeout` (work still queued).
  virtual absl::Status Drain(absl::Duration timeout) = 0;

  // Fills the ring's and the events' handles, or the ring's segment name.
  virtual absl::Status Export(DeviceExport* out) const = 0;
  // Bytes of device memory held (the ring).
  virtual uint64_t device_bytes() const = 0;
};

struct SessionDeviceSpec {
  uint64_t ring_bytes = 0;  // the arena and the out-of-schedule slot
  uint32_t ring_slots = 0;  // streaming slots; one more (out of schedule) has events too
  // Host backend: the ring's segment name ("<pool prefix>...").
  std::string ring_segment_name;
};

// The host backend: the ring is a shared-memory segment the runner maps.
absl::StatusOr<std::unique_ptr<SessionDevice>> OpenHostSessionDevice(const SessionDeviceSpec& spec);

// The CUDA backend on device `ordinal`; Unavailable in builds without CUDA. ResourceExhausted
// when the device has no room.
absl::StatusOr<std::unique_ptr<SessionDevice>> OpenCudaSessionDevice(int ordinal,
                                                                     const SessionDeviceSpec& spec);

}  // namespace ddo

#endif  // DDO_DAEMON_STREAM_SESSION_DEVICE_H_
