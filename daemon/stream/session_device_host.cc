// File: daemon/stream/session_device_host.cc
//
// The host backend's ring: "device memory" is shared memory, copies are memcpy done at once by the
// calling thread, so ordering needs no events: a slot is rewritten only after the runner
// published that it is done with it, and the runner computes synchronously.
#include <cstring>
#include <optional>

#include "absl/strings/str_cat.h"
#include "daemon/common/status_macros.h"
#include "daemon/pool/shared_segment.h"
#include "daemon/stream/session_device.h"

namespace ddo {
namespace {

class HostSessionDevice final : public SessionDevice {
 public:
  HostSessionDevice(SharedSegment ring, uint64_t ring_bytes)
      : ring_(std::move(ring)), ring_bytes_(ring_bytes) {}

  ~HostSessionDevice() override { (void)ring_.Unlink(); }

  absl::Status CopyToRing(uint64_t ring_offset, const void* source, uint64_t bytes) override {
    if (ring_offset + bytes > ring_bytes_) {
      return absl::InternalError(absl::StrCat("ring copy out of range (", ring_offset, " + ", bytes,
                                              " > ", ring_bytes_, ")"));
    }
    std::memcpy(ring_.data() + ring_offset, source, bytes);
    return absl::OkStatus();
  }

  absl::StatusOr<bool> ConsumedDone(uint32_t) override { return true; }
  absl::Status MarkReady(uint32_t) override { return absl::OkStatus(); }
  absl::StatusOr<bool> ReadyDone(uint32_t) override { return true; }
  absl::Status Drain(absl::Duration) override { return absl::OkStatus(); }

  absl::Status Export(DeviceExport* out) const override {
    out->ring_shm = ring_.name();
    return absl::OkStatus();
  }

  uint64_t device_bytes() const override { return ring_.size(); }

 private:
  SharedSegment ring_;
  uint64_t ring_bytes_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<SessionDevice>> OpenHostSessionDevice(
    const SessionDeviceSpec& spec) {
  // An empty ring still gets a segment: the runner's mapping code has one path.
  DDO_ASSIGN_OR_RETURN(
      SharedSegment ring,
      SharedSegment::Create(spec.ring_segment_name,
                            RoundUpToSegmentGranularity(std::max<uint64_t>(spec.ring_bytes, 1))));
  return std::unique_ptr<SessionDevice>(new HostSessionDevice(std::move(ring), spec.ring_bytes));
}

}  // namespace ddo
