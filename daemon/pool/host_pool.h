// File: daemon/pool/host_pool.h
//
// The host pool: ddod's shared-memory segments and their RAM budget. The pool hands out
// segments (new, or adopted from a previous ddod), pins them when CUDA is usable, and keeps
// exact accounting of reserved and pinned bytes. It does not decide what to evict: when a
// segment does not fit, Allocate says so (RESOURCE_EXHAUSTED with the sizes) and the store
// chooses what to give up.
//
// Segment names are "/ddo-<uid>-<namespace>-<16 random hex>": unguessable, and scoped by a
// namespace (derived from ddod's socket) so that two daemons of one user never touch each
// other's segments.
//
// Thread-safety: all methods may be called from any thread; accounting is guarded by mu_.
// PoolSegment objects must not outlive their pool.
#ifndef DDO_DAEMON_POOL_HOST_POOL_H_
#define DDO_DAEMON_POOL_HOST_POOL_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "daemon/common/work_progress.h"
#include "daemon/pool/shared_segment.h"

namespace ddo {

class HostPool;

// (offset, bytes) of the tensors laid out in a segment.
using SegmentExtents = std::vector<std::pair<uint64_t, uint64_t>>;

// Something that holds part of the pool's budget and gives it back on demand: the pre-faulted
// reserve (segment_reserve.h). The pool asks it before refusing an allocation or a hold for
// room, so what it holds never costs anyone else their place.
class PoolYielder {
 public:
  virtual ~PoolYielder() = default;
  // Gives back everything it holds; returns once the bytes are back in the budget.
  virtual void Yield() = 0;
};

// A segment owned by the pool. Releasing the last reference unpins and unmaps it, returns
// its bytes to the budget and, when marked discarded, removes it from /dev/shm.
class PoolSegment {
 public:
  PoolSegment(const PoolSegment&) = delete;
  PoolSegment& operator=(const PoolSegment&) = delete;
  ~PoolSegment();

  const std::string& name() const { return segment_.name(); }
  char* data() const { return segment_.data(); }
  uint64_t size() const { return segment_.size(); }
  // Every byte page-locked (by Pin, or by PinRange calls that together cover the segment).
  bool pinned() const { return pinned_.load(); }
  // Whether the pool page-locks its segments (CUDA usable).
  bool pool_pins() const;
  // Whether every page exists already (the pre-faulted reserve's segment): fill it through its
  // mapping, where nothing faults, rather than through its descriptor.
  bool prefaulted() const { return prefaulted_; }

  // Page-locks the segment when the pool pins: whatever PinRange has not covered yet
  // (idempotent). Errors leave those parts unpinned.
  absl::Status Pin();

  // Page-locks what of [offset, offset + bytes) is not pinned yet, when the pool pins: a load
  // pins each part of the segment as soon as it is written, so that pinning overlaps reading.
  // A copy to the device must not span two registrations (CUDA treats each as its own
  // allocation): a load splits at tensor boundaries, and a pre-pinned reserve's parts are
  // boundaries its takers lay their tensors out around (ReservePinGrid).
  absl::Status PinRange(uint64_t offset, uint64_t bytes);

  // Unregisters every registered range that reaches past `offset`, so that the pages past it
  // can be freed (a reserve cut to its taker's size). What of them lies before `offset` is
  // left unpinned, for the taker's own pinning.
  void UnpinFrom(uint64_t offset);

  // Unregisters every registered range that one of `extents` ((offset, bytes) of the
  // tensors laid out in the segment) crosses out of, so that the taker's own pinning
  // (PinRange, cut at tensor starts) registers each tensor within one range.
  void UnpinCrossed(const SegmentExtents& extents);

  // The registered ranges, sorted by offset.
  SegmentExtents PinnedRanges();

  // The size of the fixed parts the segment was pinned in ahead of any layout (the pre-faulted
  // reserve, pinned in the background); 0 when it was not.
  uint64_t pin_grid() const { return pin_grid_.load(); }

  // A read-write descriptor of the segment, for filling it with pwrite (ReadJob's
  // destination_fd): the pages a write fills whole are never zeroed.
  absl::StatusOr<UniqueFd> OpenForWriting() const;

  // Remove the segment from /dev/shm when the last reference goes (eviction, failed upload,
  // --discard). Without this, the segment survives ddod for the next one to adopt.
  void MarkDiscarded() { discard_.store(true); }

 private:
  friend class HostPool;
  PoolSegment(HostPool& pool, SharedSegment segment, bool prefaulted = false,
              bool in_reserve = false)
      : pool_(pool),
        segment_(std::move(segment)),
        prefaulted_(prefaulted),
        in_reserve_(in_reserve) {}

  // Registers [offset, offset + bytes) and records it; pin_mu_ held.
  absl::Status PinLocked(uint64_t offset, uint64_t bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(pin_mu_);
  // Registers the parts of [offset, end) that no recorded range covers; pin_mu_ held.
  absl::Status PinGapsLocked(uint64_t offset, uint64_t end) ABSL_EXCLUSIVE_LOCKS_REQUIRED(pin_mu_);
  // Faults in [offset, offset + bytes) unless pre-faulted, then PinLocked; pin_mu_ held.
  absl::Status PinNewLocked(uint64_t offset, uint64_t bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(pin_mu_);
  // Unregisters the recorded ranges for which `unpin(offset, bytes)` holds, and counts them
  // out of the segment's and the pool's pinned bytes; pin_mu_ held.
  void UnpinWhereLocked(const std::function<bool(uint64_t offset, uint64_t bytes)>& unpin)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(pin_mu_);

  HostPool& pool_;
  SharedSegment segment_;
  absl::Mutex pin_mu_;
  // Registered ranges: (offset, bytes), each unregistered when the segment goes.
  std::vector<std::pair<uint64_t, uint64_t>> pinned_ranges_ ABSL_GUARDED_BY(pin_mu_);
  uint64_t pinned_bytes_ ABSL_GUARDED_BY(pin_mu_) = 0;
  std::atomic<bool> pinned_{false};
  std::atomic<bool> discard_{false};
  std::atomic<uint64_t> pin_grid_{0};
  const bool prefaulted_;
  // Counted as the reserve's (PoolUsage::reserve_bytes) until HostPool::TakeFromReserve.
  std::atomic<bool> in_reserve_;
};

struct PoolOptions {
  uint64_t budget_bytes = 0;
  // Part of every segment name; see the file comment.
  std::string name_namespace;
  // Pin segments with cudaHostRegister (only when CUDA is usable).
  bool pin = false;
  int pretouch_threads = 4;
  // Threads that allocate a new segment's pages.
  int populate_threads = 4;
  // Every shm call of the pool's segments goes through it (nullptr: FileSystem::Default());
  // it must outlive the pool. Tests inject faults here.
  FileSystem* file_system = nullptr;
};

struct PoolUsage {
  uint64_t budget_bytes = 0;
  // Segments and holds; not the pre-faulted reserve, which yields to them (reserve_bytes).
  uint64_t reserved_bytes = 0;
  uint64_t held_bytes = 0;      // holds: RAM outside the pool's segments (TryHold)
  uint64_t pinned_bytes = 0;
  uint32_t segments = 0;
  uint64_t reserve_bytes = 0;  // the pre-faulted reserve, ready or being made
  // The private memory of ddod and of the runners it serves, when the budget counts them
  // (SetOutsideBytes); not in reserved_bytes.
  uint64_t outside_bytes = 0;

  // What the budget leaves the pool's segments and holds beside outside_bytes.
  uint64_t room_bytes() const { return budget_bytes - std::min(outside_bytes, budget_bytes); }
  // What is left of that room now.
  uint64_t free_bytes() const { return room_bytes() - std::min(reserved_bytes, room_bytes()); }
};

class HostPool {
 public:
  explicit HostPool(PoolOptions options);
  HostPool(const HostPool&) = delete;
  HostPool& operator=(const HostPool&) = delete;

  // A new segment of at least `bytes` (rounded up to 2 MiB). RESOURCE_EXHAUSTED when it does
  // not fit in what is left of the budget (the message gives the sizes) or /dev/shm is full;
  // on any failure the budget is as before and no segment is left in /dev/shm. `progress`,
  // when given, counts the bytes whose pages are reserved; cancelling it ends the allocation
  // with CANCELLED. `pages`: kReserved for a segment written through its descriptor (a load,
  // an upload written with pwrite), kPopulated for one written through a mapping.
  absl::StatusOr<std::shared_ptr<PoolSegment>> Allocate(
      uint64_t bytes, WorkProgress* progress = nullptr,
      SegmentPages pages = SegmentPages::kPopulated);

  // A new segment of `replaced`'s size that takes its place (the copy of an upload at
  // commit): counted against the budget without a check, since `replaced` leaves right
  // after, so the budget counts both meanwhile. Its pages are not allocated: the copy
  // allocates each range as it fills it, while the pages it copied leave `replaced`.
  absl::StatusOr<std::shared_ptr<PoolSegment>> AllocateReplacement(const PoolSegment& replaced);

  // Maps a segment a previous ddod left behind. Counted against the budget like any other;
  // RESOURCE_EXHAUSTED when it no longer fits (a smaller budget this time); the errors of
  // SharedSegment::Open otherwise. On failure the budget is as before.
  absl::StatusOr<std::shared_ptr<PoolSegment>> Adopt(const std::string& name);

  // A segment for the pre-faulted reserve: every page allocated (and zeroed) by the
  // populate threads, counted as reserve_bytes. Never yields: RESOURCE_EXHAUSTED when it does not fit
  // beside everything else. Cancelling `progress` ends it with CANCELLED.
  absl::StatusOr<std::shared_ptr<PoolSegment>> AllocateReserve(uint64_t bytes,
                                                               WorkProgress* progress);

  // Pins a reserve segment in parts of `grid` bytes, in order, until `progress` is cancelled
  // (the parts pinned so far stay pinned); does nothing when the pool does not pin. The
  // segment's pin_grid() is `grid` from then on: its takers lay their tensors out so that none
  // crosses a part (PinGridLayout).
  absl::Status PinReserve(PoolSegment& segment, uint64_t grid, WorkProgress* progress);

  // Turns a reserve segment into an ordinary one of Footprint(bytes) (at most its size): the
  // pages past that are freed (and unpinned first), and the budget counts only what stays.
  // Errors (cutting the file) leave it whole, counted whole as ordinary.
  absl::Status TakeFromReserve(PoolSegment& segment, uint64_t bytes);

  // The reserve's holder, asked to give its bytes back before an allocation or a hold is
  // refused for room (nullptr: none). It must outlive the pool's use of it.
  void SetYielder(PoolYielder* yielder) { yielder_.store(yielder); }

  // Counts `bytes` of RAM that ddod holds outside the pool's segments (a host-backend session's
  // slab and ring) against the same budget, so that one RAM budget bounds both: false, with
  // nothing counted, when they do not fit. ReleaseHold gives them back.
  bool TryHold(uint64_t bytes);
  void ReleaseHold(uint64_t bytes);

  // The RAM the processes DDO serves hold outside the pool: ddod's own heap (less its holds)
  // and its runners' private memory, as HostMemoryMeter last measured it. Counted against the
  // budget from now on: what the pool holds already stays, the next allocation or hold finds
  // the room that is left, and the pre-faulted reserve gives its bytes back when they no
  // longer fit beside it.
  void SetOutsideBytes(uint64_t bytes);

  // The bytes a new allocation of `bytes` would take.
  static uint64_t Footprint(uint64_t bytes) { return RoundUpToSegmentGranularity(bytes); }
  // Whether an allocation of `bytes` would fit now.
  bool Fits(uint64_t bytes) const;

  PoolUsage Usage() const;
  const PoolOptions& options() const { return options_; }
  FileSystem& file_system() const { return *file_system_; }
  // "/ddo-<uid>-<namespace>-": every segment of this pool starts with it.
  const std::string& name_prefix() const { return name_prefix_; }

  // Names in /dev/shm with this pool's prefix (leftovers to adopt or remove).
  std::vector<std::string> ListSegmentNames() const;

 private:
  friend class PoolSegment;

  absl::Status Reserve(uint64_t bytes, bool checked = true);
  // The budget less what the processes hold outside the pool. mu_ held.
  uint64_t RoomLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The yielder to ask when `bytes` more do not fit but would without the reserve; null when
  // asking cannot help. mu_ held.
  PoolYielder* YielderForLocked(uint64_t bytes) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status RoomErrorLocked(uint64_t bytes) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Release(uint64_t bytes, uint64_t pinned_bytes, bool in_reserve);
  void CountPinned(uint64_t bytes);
  void CountUnpinned(uint64_t bytes);

  const PoolOptions options_;
  FileSystem* const file_system_;
  const std::string name_prefix_;
  mutable absl::Mutex mu_;
  uint64_t reserved_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t pinned_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t held_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint32_t segments_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t reserve_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t outside_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  std::atomic<PoolYielder*> yielder_{nullptr};
};

// A stable 12-hex-digit namespace for the pool of the daemon serving `socket_path`.
std::string PoolNamespace(const std::string& socket_path);

}  // namespace ddo

#endif  // DDO_DAEMON_POOL_HOST_POOL_H_
