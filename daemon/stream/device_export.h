// File: daemon/stream/device_export.h
//
// What a runner needs to reach a session's device memory (docs/streaming.md): on a GPU the
// CUDA IPC handles of the ring, the resident slab and the per-slot events; on the host backend
// the shared-memory names of the ring and the slab. Plain data filled by the backends; the
// service copies it into the wire's DeviceResources.
//
// Thread-safety: a value type: filled by one backend call, then copied, never shared while written.
#ifndef DDO_DAEMON_STREAM_DEVICE_EXPORT_H_
#define DDO_DAEMON_STREAM_DEVICE_EXPORT_H_

#include <string>
#include <vector>

namespace ddo {

struct DeviceExport {
  std::string ring_handle;           // cudaIpcMemHandle_t bytes; empty on the host backend
  std::string ring_shm;              // host backend: the ring's segment
  std::vector<std::string> ready_event_handles;     // cudaIpcEventHandle_t bytes, per slot
  std::vector<std::string> consumed_event_handles;  // likewise
  std::string resident_slab_handle;  // cudaIpcMemHandle_t bytes; empty on the host backend
  std::string resident_slab_shm;     // host backend: the slab's segment
};

}  // namespace ddo

#endif  // DDO_DAEMON_STREAM_DEVICE_EXPORT_H_
