// File: daemon/stream/resident_slab_host.cc
//
// The host backend's slab: a shared-memory segment the runner maps; copies are memcpy.
#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "daemon/common/status_macros.h"
#include "daemon/pool/shared_segment.h"
#include "daemon/stream/resident_slab.h"

namespace ddo {
namespace {

class HostSlab final : public ResidentSlab {
 public:
  HostSlab(SharedSegment segment, uint64_t bytes) : segment_(std::move(segment)), bytes_(bytes) {}
  ~HostSlab() override { (void)segment_.Unlink(); }

  absl::Status Copy(uint64_t offset, const void* source, uint64_t bytes) override {
    if (offset + bytes > bytes_) {
      return absl::InternalError(
          absl::StrCat("slab copy past its end (", offset, "+", bytes, " > ", bytes_, ")"));
    }
    std::memcpy(segment_.data() + offset, source, bytes);
    return absl::OkStatus();
  }
  absl::Status Finish() override { return absl::OkStatus(); }
  absl::Status Export(DeviceExport* out) const override {
    out->resident_slab_shm = segment_.name();
    return absl::OkStatus();
  }
  uint64_t device_bytes() const override { return segment_.size(); }

 private:
  SharedSegment segment_;
  uint64_t bytes_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<ResidentSlab>> OpenHostSlab(const std::string& segment_name,
                                                           uint64_t bytes) {
  // An empty slab still gets a segment: the runner's mapping code has one path.
  DDO_ASSIGN_OR_RETURN(
      SharedSegment segment,
      SharedSegment::Create(segment_name, RoundUpToSegmentGranularity(std::max<uint64_t>(bytes, 1))));
  return std::unique_ptr<ResidentSlab>(new HostSlab(std::move(segment), bytes));
}

}  // namespace ddo
