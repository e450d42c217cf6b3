// The host-only build (-DDDO_WITH_CUDA=OFF, or no CUDA toolkit at build time).
#include "daemon/platform/gpu_inventory.h"

namespace ddo {

GpuInventory ProbeGpus() {
  GpuInventory inventory;
  inventory.backend = ComputeBackend::kHost;
  inventory.detail = "built without CUDA; host backend";
  return inventory;
}

absl::StatusOr<uint64_t> QueryFreeBytes(int ordinal) {
  return absl::FailedPreconditionError(
      "ddod was built without CUDA: no device " + std::to_string(ordinal));
}

}  // namespace ddo
