// The CUDA build. cudart is linked statically; it dlopens libcuda.so.1 on first use, so a
// missing driver shows up here as an error code rather than as a failure to start.
#include <cuda_runtime_api.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "daemon/common/logging.h"
#include "daemon/platform/gpu_inventory.h"

namespace ddo {
namespace {

std::string CudaErrorText(cudaError_t error) {
  return absl::StrCat(cudaGetErrorName(error), ": ", cudaGetErrorString(error));
}

std::string VersionText(int version) {
  return absl::StrCat(version / 1000, ".", (version % 1000) / 10);
}

}  // namespace

GpuInventory ProbeGpus() {
  GpuInventory inventory;
  int count = 0;
  if (cudaError_t error = cudaGetDeviceCount(&count); error != cudaSuccess) {
    // Clear the sticky error so a later retry in this process starts clean.
    cudaGetLastError();
    inventory.detail = absl::StrCat("CUDA unusable (", CudaErrorText(error), "); host backend");
    return inventory;
  }
  if (count == 0) {
    inventory.detail = "no CUDA devices; host backend";
    return inventory;
  }
  int driver = 0;
  int runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);

  for (int ordinal = 0; ordinal < count; ++ordinal) {
    cudaDeviceProp props{};
    if (cudaError_t error = cudaGetDeviceProperties(&props, ordinal); error != cudaSuccess) {
      Logger("platform")->warn("skipping CUDA device {}: {}", ordinal, CudaErrorText(error));
      continue;
    }
    GpuDevice device;
    device.ordinal = ordinal;
    unsigned char uuid[16];
    static_assert(sizeof(props.uuid.bytes) == sizeof(uuid));
    std::memcpy(uuid, props.uuid.bytes, sizeof(uuid));
    device.uuid = FormatGpuUuid(uuid);
    device.name = props.name;
    device.total_bytes = props.totalGlobalMem;
    device.compute_capability = absl::StrCat(props.major, ".", props.minor);
    device.pci_bus_id = absl::StrFormat("%04x:%02x:%02x.0", props.pciDomainID, props.pciBusID,
                                        props.pciDeviceID);
    inventory.devices.push_back(std::move(device));
  }
  if (inventory.devices.empty()) {
    inventory.detail = "no usable CUDA devices; host backend";
    return inventory;
  }
  inventory.backend = ComputeBackend::kCuda;
  inventory.detail = absl::StrCat("CUDA driver ", VersionText(driver), ", runtime ",
                                  VersionText(runtime), " (static)");
  return inventory;
}

absl::StatusOr<uint64_t> QueryFreeBytes(int ordinal) {
  // cudaSetDevice is per thread; gRPC handler threads are pool threads, so set it every time.
  if (cudaError_t error = cudaSetDevice(ordinal); error != cudaSuccess) {
    return absl::UnavailableError(
        absl::StrCat("cudaSetDevice(", ordinal, "): ", CudaErrorText(error)));
  }
  size_t free_bytes = 0;
  size_t total_bytes = 0;
  if (cudaError_t error = cudaMemGetInfo(&free_bytes, &total_bytes); error != cudaSuccess) {
    return absl::UnavailableError(
        absl::StrCat("cudaMemGetInfo on device ", ordinal, ": ", CudaErrorText(error)));
  }
  return static_cast<uint64_t>(free_bytes);
}

}  // namespace ddo
