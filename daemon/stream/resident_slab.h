// File: daemon/stream/resident_slab.h
//
// A streaming session's resident slab: the device memory holding every tensor that stays on
// the device, filled once from the pinned pool and bound by the runner. It is its own object
// (not part of the session's ring) so that, under a warm policy (warm_process), it can outlive
// its session and serve the next runner of the same component and plan on the same device
// without being filled again. Two backends as for the ring: CUDA (cudaMalloc, exported over
// CUDA IPC) and host (a shared-memory segment).
//
// Thread-safety: one thread at a time (the opener; the slab is immutable once filled).
#ifndef DDO_DAEMON_STREAM_RESIDENT_SLAB_H_
#define DDO_DAEMON_STREAM_RESIDENT_SLAB_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "daemon/stream/device_export.h"

namespace ddo {

class ResidentSlab {
 public:
  virtual ~ResidentSlab() = default;

  // Enqueues a copy of host bytes to `offset`; Finish() waits for all of them.
  virtual absl::Status Copy(uint64_t offset, const void* source, uint64_t bytes) = 0;
  virtual absl::Status Finish() = 0;
  // Sets the slab's handle or shared-memory name.
  virtual absl::Status Export(DeviceExport* out) const = 0;
  virtual uint64_t device_bytes() const = 0;
};

struct PlannedTensor;
struct TensorEntry;
class ComponentBytes;

// Copies every resident tensor of a plan from the component's host bytes into `slab` and waits
// for the copies. InternalError naming the tensor on a device error.
absl::Status FillResidentSlab(ResidentSlab& slab, const std::vector<PlannedTensor>& resident,
                              const std::vector<TensorEntry>& tensors, const ComponentBytes& host);

absl::StatusOr<std::unique_ptr<ResidentSlab>> OpenHostSlab(const std::string& segment_name,
                                                           uint64_t bytes);
// Unavailable in builds without CUDA; ResourceExhausted when the device has no room.
absl::StatusOr<std::unique_ptr<ResidentSlab>> OpenCudaSlab(int ordinal, uint64_t bytes);

}  // namespace ddo

#endif  // DDO_DAEMON_STREAM_RESIDENT_SLAB_H_
