// File: daemon/stream/staging_buffers.h
//
// The few host buffers a session of a file-tier component reads its units into before they
// are copied to the ring (docs/architecture.md §6, the file tier): files -> staging -> ring.
// Each buffer holds one unit laid out as in the ring (the plan's slot size). They are page
// aligned, touched once, and page-locked for a CUDA session (so its copies are asynchronous),
// and their bytes count in the host pool's budget (HostPool::TryHold): ddod's one RAM budget
// bounds them with the pool, the host sessions and everything else it holds.
//
// A buffer is taken with Acquire() and given back with Release() once the copy that reads it
// has finished (the session's "ready" of that unit), never before.
//
// Thread-safety: one thread at a time (the device's copy worker, or the opener before the
// session is published).
#ifndef DDO_DAEMON_STREAM_STAGING_BUFFERS_H_
#define DDO_DAEMON_STREAM_STAGING_BUFFERS_H_

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "daemon/pool/host_pool.h"

namespace ddo {

class StagingBuffers {
 public:
  // `count` buffers of `bytes` each (rounded up to pages), page-locked when `pin` (and this
  // build can pin), counted in `ram` (may be null: uncounted, for tests). RESOURCE_EXHAUSTED
  // naming the budget when `ram` cannot hold them; the error of the mapping or the pinning
  // otherwise.
  static absl::StatusOr<std::unique_ptr<StagingBuffers>> Create(uint32_t count, uint64_t bytes,
                                                                bool pin, HostPool* ram);
  StagingBuffers(const StagingBuffers&) = delete;
  StagingBuffers& operator=(const StagingBuffers&) = delete;
  ~StagingBuffers();

  // A free buffer's index, or nullopt when every one is taken.
  std::optional<uint32_t> Acquire();
  void Release(uint32_t index);
  char* data(uint32_t index) const { return base_ + uint64_t{index} * stride_; }
  uint64_t buffer_bytes() const { return stride_; }
  uint32_t count() const { return static_cast<uint32_t>(taken_.size()); }
  uint32_t free_count() const {
    return static_cast<uint32_t>(std::count(taken_.begin(), taken_.end(), false));
  }
  // Bytes held (and counted in the budget).
  uint64_t total_bytes() const { return stride_ * taken_.size(); }
  bool pinned() const { return pinned_; }

 private:
  StagingBuffers(char* base, uint64_t stride, uint32_t count, bool pinned, HostPool* ram)
      : base_(base), stride_(stride), taken_(count, false), pinned_(pinned), ram_(ram) {}

  char* const base_;
  const uint64_t stride_;
  std::vector<bool> taken_;
  const bool pinned_;
  HostPool* const ram_;
};

}  // namespace ddo

#endif  // DDO_DAEMON_STREAM_STAGING_BUFFERS_H_
