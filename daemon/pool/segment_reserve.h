// File: daemon/pool/segment_reserve.h
//
// The pre-faulted reserve: one pool segment whose pages the kernel has already allocated and
// zeroed, kept ready for the next load. Creating a segment's pages is most of a load from the
// page cache (the kernel zeroes every fresh shared-memory page, and writes into one tmpfs file
// serialise on its inode); a load that takes the reserve instead reads its files straight into
// pages that exist, from several threads, and the segment is cut to the load's size (the pages
// past it are freed). A background thread makes the next one 3 s after the last take (so as not
// to compete with the taker's own fill, or with the next loads of a pipeline), while the pool
// has room for it.
//
// Where the pool pins, the reserve's segment is also page-locked in the background, in parts of
// `pin_grid_bytes` (cudaHostRegister, the other half of a load's cost: about 20 GB/s on the
// H100 machine against 40 GB/s for reading into existing pages). A copy to the device must stay
// within one registration, so a taker lays its tensors out around the parts' boundaries
// (PinGridLayout); the parts past the cut are unpinned before their pages are freed.
//
// The reserve counts in the RAM budget (PoolUsage::reserve_bytes) but never costs anyone
// room: the pool asks it to Yield before refusing an allocation or a hold, and the store's
// choices of what to evict or demote see its bytes as free.
//
// Thread-safety: every method may be called from any thread. The reserve must outlive the
// pool's use of it (it is the pool's yielder) and be destroyed before the pool.
#ifndef DDO_DAEMON_POOL_SEGMENT_RESERVE_H_
#define DDO_DAEMON_POOL_SEGMENT_RESERVE_H_

#include <cstdint>
#include <memory>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/common/work_progress.h"
#include "daemon/pool/host_pool.h"

namespace ddo {

// The reserve's pinned parts: large, so that laying tensors out around their boundaries wastes
// little (at most a tensor's bytes a part); small enough that the part a cut falls in, pinned
// again by the taker, costs little (about 0.05 s on the H100 machine).
inline constexpr uint64_t kReservePinGridBytes = uint64_t{1} << 30;

struct SegmentReserveOptions {
  // The size of the segment kept ready (rounded up to the pool's granularity); 0: no reserve.
  uint64_t target_bytes = 0;
  // How long after a take (or a yield) the next segment is made: the taker's fill and loads that
  // come in a row (a pipeline's components) should not compete with a refill for CPUs and
  // memory bandwidth.
  absl::Duration refill_delay = absl::Seconds(3);
  // How often a refill that found no room tries again.
  absl::Duration retry_interval = absl::Seconds(2);
  // The parts the segment is pinned in (where the pool pins); 0: the taker pins it.
  uint64_t pin_grid_bytes = kReservePinGridBytes;
};

class SegmentReserve final : public PoolYielder {
 public:
  // A take must be at least 1/kSmallestShare of the target.
  static constexpr uint64_t kSmallestShare = 4;

  // Registers itself as `pool`'s yielder; makes nothing until Start.
  SegmentReserve(HostPool& pool, SegmentReserveOptions options);
  SegmentReserve(const SegmentReserve&) = delete;
  SegmentReserve& operator=(const SegmentReserve&) = delete;
  // Stops the refill thread and gives the segment back.
  ~SegmentReserve() override;

  // Starts making segments (call once the pool holds what it adopted at start).
  void Start();

  // The ready segment, cut to HostPool::Footprint(bytes) and counted as an ordinary one; null
  // when none is ready, the ready one is smaller, or `bytes` are less than a quarter of the
  // target (kSmallestShare).
  std::shared_ptr<PoolSegment> Take(uint64_t bytes);

  // The grid the ready segment is pinned in (PoolSegment::pin_grid) when Take would give it
  // for `bytes` laid out on that grid; 0 otherwise (none ready, too small, not pinned).
  uint64_t PinGridFor(uint64_t bytes) const;

  // Gives the ready segment back and cancels one being made (PoolYielder).
  void Yield() override;

  // The size of the segment ready now (0: none).
  uint64_t ready_bytes() const;
  uint64_t target_bytes() const { return target_; }

 private:
  void Run();
  // Whether Take would give the ready segment for `bytes`; mu_ held.
  bool WouldTakeLocked(uint64_t bytes) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether the thread should make a segment now; mu_ held.
  bool ShouldMakeLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  HostPool& pool_;
  const uint64_t target_;
  const SegmentReserveOptions options_;
  mutable absl::Mutex mu_;
  absl::CondVar changed_;
  std::shared_ptr<PoolSegment> ready_ ABSL_GUARDED_BY(mu_);
  // The segment being made, cancelled by Yield; null when none is.
  WorkProgress* making_ ABSL_GUARDED_BY(mu_) = nullptr;
  absl::Time not_before_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool reported_no_room_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace ddo

#endif  // DDO_DAEMON_POOL_SEGMENT_RESERVE_H_
