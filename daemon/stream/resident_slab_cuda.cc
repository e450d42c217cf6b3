// File: daemon/stream/resident_slab_cuda.cc
//
// The CUDA backend's slab: cudaMalloc'd on the session's device, filled on a stream of its
// own, exported once over CUDA IPC.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "daemon/common/status_macros.h"
#include "daemon/device/cuda_stream.h"
#include "daemon/device/device_buffer.h"
#include "daemon/device/device_guard.h"
#include "daemon/stream/resident_slab.h"

namespace ddo {
namespace {

class CudaSlab final : public ResidentSlab {
 public:
  CudaSlab(int ordinal, DeviceBuffer buffer, CudaStream stream)
      : ordinal_(ordinal), buffer_(std::move(buffer)), stream_(std::move(stream)) {}

  absl::Status Copy(uint64_t offset, const void* source, uint64_t bytes) override {
    if (offset + bytes > buffer_.size()) {
      return absl::InternalError(absl::StrCat("slab copy past its end (", offset, "+", bytes,
                                              " > ", buffer_.size(), ")"));
    }
    DDO_ASSIGN_OR_RETURN(DeviceGuard guard, DeviceGuard::Create(ordinal_));
    return stream_.CopyToDevice(static_cast<char*>(buffer_.data()) + offset, source, bytes);
  }
  absl::Status Finish() override {
    DDO_ASSIGN_OR_RETURN(DeviceGuard guard, DeviceGuard::Create(ordinal_));
    return stream_.Synchronize();
  }
  absl::Status Export(DeviceExport* out) const override {
    DDO_ASSIGN_OR_RETURN(out->resident_slab_handle, buffer_.ExportIpcHandle());
    return absl::OkStatus();
  }
  uint64_t device_bytes() const override { return buffer_.size(); }

 private:
  int ordinal_;
  DeviceBuffer buffer_;
  CudaStream stream_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<ResidentSlab>> OpenCudaSlab(int ordinal, uint64_t bytes) {
  // cudaMalloc of 0 bytes gives no exportable pointer: an empty slab gets a minimal allocation.
  DDO_ASSIGN_OR_RETURN(DeviceBuffer buffer,
                       DeviceBuffer::Allocate(ordinal, std::max<uint64_t>(bytes, 256)));
  DDO_ASSIGN_OR_RETURN(CudaStream stream, CudaStream::Create(ordinal));
  return std::unique_ptr<ResidentSlab>(new CudaSlab(ordinal, std::move(buffer), std::move(stream)));
}

}  // namespace ddo
