// File: daemon/platform/gpu_inventory.h
//
// Which compute backend ddod runs with and the devices it sees. With CUDA built in, the CUDA
// runtime is linked statically and loads the driver (libcuda) itself at run time, so the same
// binary starts on a machine without a GPU or driver: it then reports the host backend and
// says why. Without CUDA built in (-DDDO_WITH_CUDA=OFF) the host backend is the only one.
//
// Thread-safety: ProbeGpus and QueryFreeBytes may be called from any thread.
#ifndef DDO_DAEMON_PLATFORM_GPU_INVENTORY_H_
#define DDO_DAEMON_PLATFORM_GPU_INVENTORY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace ddo {

enum class ComputeBackend { kHost, kCuda };

struct GpuDevice {
  int ordinal = 0;
  std::string uuid;  // "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"
  std::string name;
  uint64_t total_bytes = 0;
  std::string compute_capability;  // "9.0"
  std::string pci_bus_id;          // "0000:17:00.0"
};

struct GpuInventory {
  ComputeBackend backend = ComputeBackend::kHost;
  // Driver and runtime versions, or why the host backend was chosen.
  std::string detail;
  std::vector<GpuDevice> devices;
};

// Enumerates CUDA devices once. Never fails: problems select the host backend with a detail.
GpuInventory ProbeGpus();

// Free memory on the device with this ordinal right now.
absl::StatusOr<uint64_t> QueryFreeBytes(int ordinal);

// Formats 16 UUID bytes the way nvidia-smi does.
std::string FormatGpuUuid(const unsigned char (&bytes)[16]);

}  // namespace ddo

#endif  // DDO_DAEMON_PLATFORM_GPU_INVENTORY_H_
