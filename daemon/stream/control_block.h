// File: daemon/stream/control_block.h
//
// The per-session control block and the per-device doorbell: small shared-memory segments
// that ddod and a runner both map, through which the hot path runs without gRPC. The layout
// is part of the protocol (docs/streaming.md §3) and lives in ddo/wire/control_layout.h, which
// the clients share; these classes own ddod's segments and read them through its views.
//
// Thread-safety: the accessors are atomic loads and stores; one ddod thread (the session's copy
// worker) writes ddod's words, the runner writes its own.
#ifndef DDO_DAEMON_STREAM_CONTROL_BLOCK_H_
#define DDO_DAEMON_STREAM_CONTROL_BLOCK_H_

#include <atomic>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "daemon/pool/shared_segment.h"
#include "ddo/wire/control_layout.h"
#include "ddo/wire/futex.h"

namespace ddo {

// The absl::Duration form of ddo::FutexWait (ddo/wire/futex.h) for ddod's callers.
void FutexWait(const std::atomic<uint32_t>* word, uint32_t expected, absl::Duration timeout);

class ControlBlock {
 public:
  // Creates the segment `name` for a session with `slots` streaming slots (plus the
  // out-of-schedule slot, at `arena_bytes` in the ring) and `units` units.
  static absl::StatusOr<ControlBlock> Create(const std::string& name, uint32_t slots,
                                             uint32_t units, uint64_t arena_bytes);
  // Bytes of the layout for `slots` streaming slots (before rounding to the segment size).
  static uint64_t LayoutBytes(uint32_t slots) { return control_layout::LayoutBytes(slots); }

  ControlBlock(ControlBlock&&) noexcept = default;
  ControlBlock& operator=(ControlBlock&&) = delete;
  // Unmaps and removes the segment from /dev/shm.
  ~ControlBlock();

  const std::string& name() const { return segment_.name(); }
  uint64_t size() const { return segment_.size(); }
  uint32_t slots() const { return slots_; }

  // ddod's words.
  std::atomic<uint64_t>& ready() { return view().ready(); }
  std::atomic<uint64_t>& sync_done() { return view().sync_done(); }
  std::atomic<uint64_t>& slot_use(uint32_t slot) { return view().slot_use(slot); }
  // Where in the ring the slot's unit lies; written before its slot_use.
  std::atomic<uint64_t>& slot_offset(uint32_t slot) { return view().slot_offset(slot); }
  void set_schedule_length(uint32_t length);
  void set_state(SessionState state);
  SessionState state() { return static_cast<SessionState>(view().state().load()); }

  // The runner's words.
  std::atomic<uint64_t>& consumed() { return view().consumed(); }
  std::atomic<uint32_t>& runner_waiting() { return view().runner_waiting(); }
  std::atomic<uint64_t>& sync_request() { return view().sync_request(); }
  std::atomic<uint32_t>& sync_unit() { return view().sync_unit(); }
  uint64_t skipped_uses() { return view().skipped_uses().load(); }
  uint64_t sync_uses() { return view().sync_uses().load(); }
  uint64_t consumed_uses() { return view().consumed_uses().load(); }

  // Wakes a runner sleeping on ready or sync_done, if it says it sleeps.
  void WakeRunner();

 private:
  ControlBlock(SharedSegment segment, uint32_t slots)
      : segment_(std::move(segment)), slots_(slots) {}
  ControlView view() const {
    return ControlView{reinterpret_cast<uint8_t*>(segment_.data()), slots_};
  }
  std::atomic<uint64_t>& U64(uint64_t offset) { return view().U64(offset); }
  std::atomic<uint32_t>& U32(uint64_t offset) { return view().U32(offset); }

  SharedSegment segment_;
  uint32_t slots_ = 0;
};

// The doorbell of one device's copy worker.
class Doorbell {
 public:
  static absl::StatusOr<Doorbell> Create(const std::string& name);

  Doorbell(Doorbell&&) noexcept = default;
  Doorbell& operator=(Doorbell&&) = delete;
  ~Doorbell();

  const std::string& name() const { return segment_.name(); }

  // Sleeps until rung (or `timeout`); `work_pending` is checked after announcing the sleep,
  // so a ring between the caller's last look and the sleep is not lost.
  template <typename WorkPending>
  void Sleep(absl::Duration timeout, WorkPending work_pending) {
    const uint32_t observed = seq().load();
    sleeping().store(1);
    if (!work_pending()) FutexWait(&seq(), observed, timeout);
    sleeping().store(0);
  }
  // Rings from inside ddod (a session opened, closed, got its schedule).
  void Ring();

 private:
  explicit Doorbell(SharedSegment segment) : segment_(std::move(segment)) {}
  DoorbellView view() const { return DoorbellView{reinterpret_cast<uint8_t*>(segment_.data())}; }
  std::atomic<uint32_t>& seq() { return view().seq(); }
  std::atomic<uint32_t>& sleeping() { return view().daemon_sleeping(); }

  SharedSegment segment_;
};

}  // namespace ddo

#endif  // DDO_DAEMON_STREAM_CONTROL_BLOCK_H_
