// File: daemon/stream/unit_source.h
//
// Where a session's units come from (docs/architecture.md §6, the file tier). A unit whose
// tensors are all in the pool is copied to the ring in place, from the pool's segments. A unit
// with a tensor in a backing file is first read, with positional reads through the
// descriptors ddod holds, into a staging buffer laid out as the unit is in the ring (each
// tensor at its planned offset); the ring copy then reads the buffer, which stays taken until
// that copy has finished (Release, when the session publishes the unit).
//
// The reads are synchronous on the caller's thread (the device's copy worker): correct, and
// overlapped with the device's copies already in flight, but one read at a time.
//
// Thread-safety: one thread at a time (the device's copy worker, or the opener before the
// session is published).
#ifndef DDO_DAEMON_STREAM_UNIT_SOURCE_H_
#define DDO_DAEMON_STREAM_UNIT_SOURCE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "daemon/layout/session_plan.h"
#include "daemon/layout/tensor_table.h"
#include "daemon/pool/host_pool.h"
#include "daemon/store/component_bytes.h"
#include "daemon/stream/staging_buffers.h"

namespace ddo {

// How many staging buffers a session of a file-tier component takes (each the plan's slot
// size): one being read while the others' copies run.
inline constexpr uint32_t kFileStagingBuffers = 3;

// The staging a session over `host` needs for `plan`: kFileStagingBuffers buffers of the
// plan's slot size when the component has backing files and units to stream, page-locked when
// `pin`, counted in `ram` (StagingBuffers::Create's errors); null when it needs none.
absl::StatusOr<std::unique_ptr<StagingBuffers>> StagingFor(const ComponentBytes& host,
                                                           const SessionPlan& plan, bool pin,
                                                           HostPool* ram);

class UnitSource {
 public:
  // `staging` may be null when no tensor of `host` lies in a file.
  UnitSource(ComponentBytes host, std::unique_ptr<StagingBuffers> staging)
      : host_(std::move(host)), staging_(std::move(staging)) {}

  // Where a unit's bytes are for the ring copy: the unit's image (its span, each tensor at its
  // planned offset) in staging buffer `buffer`, or in place in the pool (`buffer` empty, and
  // the copy takes each tensor from ComponentBytes::DataOf).
  struct Staged {
    std::optional<uint32_t> buffer;
    const char* image = nullptr;  // with `buffer`: the unit's image
  };
  // Stages `unit` of a component whose table is `tensors`: nullopt when it must be read from a
  // file and every staging buffer still waits on a copy (ask again once a copy finished); a
  // read error (DataLoss when a file shrank, naming it) fails the session.
  absl::StatusOr<std::optional<Staged>> Stage(const StreamUnit& unit,
                                              const std::vector<TensorEntry>& tensors);
  // Gives back the staging buffer of a unit whose ring copy finished.
  void Release(const Staged& staged);

  const ComponentBytes& host() const { return host_; }
  // Bytes read from files so far, and the staging held (0 for a pool component).
  uint64_t file_bytes_read() const { return file_bytes_read_; }
  uint64_t staging_bytes() const { return staging_ ? staging_->total_bytes() : 0; }

 private:
  bool InFiles(const StreamUnit& unit) const;
  absl::Status ReadImage(const StreamUnit& unit, const std::vector<TensorEntry>& tensors,
                         char* image);

  const ComponentBytes host_;
  const std::unique_ptr<StagingBuffers> staging_;
  uint64_t file_bytes_read_ = 0;
};

}  // namespace ddo

#endif  // DDO_DAEMON_STREAM_UNIT_SOURCE_H_
