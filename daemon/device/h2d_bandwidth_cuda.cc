#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "daemon/common/status_macros.h"
#include "daemon/device/cuda_check.h"
#include "daemon/device/cuda_stream.h"
#include "daemon/device/device_buffer.h"
#include "daemon/device/device_guard.h"
#include "daemon/device/h2d_bandwidth.h"

namespace ddo {
namespace {

// Page-locked host memory for the measurement, freed however the function returns.
class PinnedHostBuffer {
 public:
  explicit PinnedHostBuffer(void* data) : data_(data) {}
  PinnedHostBuffer(const PinnedHostBuffer&) = delete;
  PinnedHostBuffer& operator=(const PinnedHostBuffer&) = delete;
  ~PinnedHostBuffer() { WarnIfCudaError(cudaFreeHost(data_), "cudaFreeHost"); }
  void* data() const { return data_; }

 private:
  void* data_;
};

}  // namespace

absl::StatusOr<double> MeasurePinnedH2DGbps(int ordinal, uint64_t bytes, int repeats) {
  DDO_ASSIGN_OR_RETURN(DeviceGuard guard, DeviceGuard::Create(ordinal));
  void* host = nullptr;
  DDO_CUDA_RETURN_IF_ERROR(cudaHostAlloc(&host, bytes, cudaHostAllocPortable),
                           absl::StrCat("cudaHostAlloc of ", bytes, " bytes"));
  PinnedHostBuffer pinned(host);
  DDO_ASSIGN_OR_RETURN(DeviceBuffer device, DeviceBuffer::Allocate(ordinal, bytes));
  DDO_ASSIGN_OR_RETURN(CudaStream stream, CudaStream::Create(ordinal));

  DDO_RETURN_IF_ERROR(stream.CopyToDevice(device.data(), pinned.data(), bytes));  // warm-up
  DDO_RETURN_IF_ERROR(stream.Synchronize());
  double best_seconds = 0;
  for (int i = 0; i < std::max(repeats, 1); ++i) {
    const auto started = std::chrono::steady_clock::now();
    DDO_RETURN_IF_ERROR(stream.CopyToDevice(device.data(), pinned.data(), bytes));
    DDO_RETURN_IF_ERROR(stream.Synchronize());
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    best_seconds = i == 0 ? seconds : std::min(best_seconds, seconds);
  }
  return static_cast<double>(bytes) / best_seconds / 1e9;
}

}  // namespace ddo
