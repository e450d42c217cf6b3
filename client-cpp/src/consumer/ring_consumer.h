// File: client-cpp/src/consumer/ring_consumer.h
//
// The runner's side of the streaming hot path: which ring slot holds the weights a Linear
// needs. The port of RingConsumer in py/ring_consumer.py, kept identical in behaviour
// (docs/streaming.md §4; docs/plans/issue-18-client-cpp.md §2). Torch-free: Acquire returns
// where in the ring the unit lies; RingViews (ring_views.h) turns that into tensors.
//
// The consumer holds at most one unit. Asking for the held unit again counts nothing (that is
// how "consecutive uses of one unit count once", and how schedules are recorded); asking for
// another unit first releases the held one, then acquires the new one:
// - in schedule: the unit is schedule[u mod L]; wait until ready > u, check
//   slot_use[u mod K] == u, and use the unit at slot_offset[u mod K];
// - skip: the unit is one of the next K-1 of the schedule; publish `consumed` past the uses in
//   between (counted as skipped), then acquire it in schedule;
// - out of schedule (and every use of the learning forward): sync_unit, sync_request and the
//   doorbell ask ddod for it; wait for sync_done and use slot K (right after the arena).
//
// On CUDA, `record_consumed` records the slot's interprocess "consumed" event on the current
// stream when a slot is released, and `before_switch` refuses a CUDA graph capture; on the host
// backend both are empty.
//
// Thread-safety: none; one forward at a time per session.
#ifndef DDO_CLIENT_CONSUMER_RING_CONSUMER_H_
#define DDO_CLIENT_CONSUMER_RING_CONSUMER_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "client-cpp/src/consumer/control_block.h"

namespace ddo::consumer {

// The counters of py/ring_consumer.py, with its derived figures.
struct ConsumerStatistics {
  uint64_t uses = 0;           // units acquired (the held unit asked again is not one)
  uint64_t streamed_uses = 0;  // in-schedule uses released
  uint64_t sync_uses = 0;      // out-of-schedule uses
  uint64_t skipped_uses = 0;   // schedule uses declared done without being used
  uint64_t bytes_used = 0;     // spans of the units acquired
  int64_t wait_ns = 0;         // blocked in waits
  int64_t overhead_ns = 0;     // in acquire and release bookkeeping, waits excluded

  double wait_seconds() const { return wait_ns / 1e9; }
  // The mean overhead per acquired unit in microseconds (the benchmark's per-unit figure).
  double overhead_us_per_unit() const { return uses ? overhead_ns / double(uses) / 1e3 : 0.0; }
};

struct RingConsumerOptions {
  // The mapped control block and doorbell (owned by the caller, alive while the consumer is);
  // the names only appear in messages.
  uint8_t* control = nullptr;
  uint64_t control_bytes = 0;
  std::string control_name;
  uint8_t* doorbell = nullptr;
  uint64_t doorbell_bytes = 0;
  std::string doorbell_name;
  // The Attach answer's K, unit count and arena, which the block must repeat.
  uint32_t slots = 0;
  uint32_t units = 0;
  uint64_t arena_bytes = 0;
  // unit_spans[u]: the bytes unit u occupies in the ring; one per unit.
  std::vector<uint64_t> unit_spans;
  // The schedule ddod already knows; empty: learn it on the first forward.
  std::vector<uint32_t> schedule;
  // ddod's pid; < 0: the block's daemon_pid word (as Python reads it).
  int64_t daemon_pid = -1;
  int64_t stall_timeout_ns = kDefaultStallTimeoutNs;
  // CUDA only: records consumed_event[slot] on the current stream.
  std::function<void(uint32_t slot)> record_consumed;
  // CUDA only: runs before a unit is switched in (refuses a CUDA graph capture).
  std::function<void()> before_switch;
  // Optional: run around each futex sleep of a wait (ControlBlock::SetSleepHooks); both or
  // neither.
  std::function<void()> before_sleep;
  std::function<void()> after_sleep;
};

class RingConsumer {
 public:
  // Checks the block, the doorbell and the schedule; ddo::Error or StreamingError otherwise.
  explicit RingConsumer(RingConsumerOptions options);

  RingConsumer(const RingConsumer&) = delete;
  RingConsumer& operator=(const RingConsumer&) = delete;

  // The byte offset in the ring of `unit`'s slot, acquiring it (and releasing the unit held
  // before) unless it is the held one. Throws StreamingError (a slot holds another use than
  // published, an unknown unit, a stall), SessionClosedError, DaemonGoneError.
  uint64_t Acquire(uint32_t unit) {
    if (int64_t{unit} == held_unit_) return held_offset_;
    return Switch(unit);
  }
  // Releases the held unit, if any.
  void Release() {
    if (held_unit_ != kNothingHeld) ReleaseHeld();
  }
  // Releases `unit` only if it is the held one.
  void Release(uint32_t unit) {
    if (int64_t{unit} == held_unit_) ReleaseHeld();
  }

  // The root forward starts: releases a unit left held (by a forward that threw) and skips to
  // the start of the next cycle when the last forward ended mid-cycle.
  void BeginForward();
  // The root forward returned: releases the held unit. After the learning forward, returns the
  // order of the units it used (the caller sends it with SetSchedule, then calls
  // AdoptSchedule); empty otherwise.
  std::vector<uint32_t> EndForward();
  // ddod accepted `accepted` uses per cycle of the learned `order`: StreamingError unless that
  // is all of it; then the consumer follows it from use 0.
  void AdoptSchedule(std::vector<uint32_t> order, uint64_t accepted);
  // Follows `schedule` (empty: learn it on the next forward). StreamingError naming the first
  // 10 units that do not exist.
  void SetSchedule(std::vector<uint32_t> schedule);
  // Forgets the held unit without releasing it (before the ring's memory is closed).
  void ForgetHeld() { held_unit_ = kNothingHeld; }

  const std::vector<uint32_t>& schedule() const { return schedule_; }
  bool learning() const { return learning_; }
  // The unit held now, or -1.
  int64_t held_unit() const { return held_unit_; }
  uint64_t next_use() const { return use_; }
  const ConsumerStatistics& statistics() const { return stats_; }
  ControlBlock& block() { return block_; }
  Doorbell& doorbell() { return doorbell_; }
  uint32_t unit_count() const { return static_cast<uint32_t>(spans_.size()); }
  uint64_t span(uint32_t unit) const { return spans_[unit]; }

 private:
  static constexpr int64_t kNothingHeld = -1;

  uint64_t Switch(uint32_t unit);
  int64_t AcquireInSchedule(uint32_t unit);
  int64_t AcquireOutOfSchedule(uint32_t unit);
  void ReleaseHeld();
  void SkipTo(uint64_t use);

  ControlBlock block_;
  Doorbell doorbell_;
  uint32_t slots_ = 0;
  std::vector<uint64_t> spans_;
  std::function<void(uint32_t)> record_consumed_;
  std::function<void()> before_switch_;
  std::vector<uint32_t> schedule_;
  bool learning_ = true;
  std::vector<uint32_t> order_;
  // The next use number u, the requests made, and what is held.
  uint64_t use_ = 0;
  uint64_t requests_ = 0;
  int64_t held_unit_ = kNothingHeld;
  uint64_t held_offset_ = 0;
  uint32_t held_slot_ = 0;
  bool held_streamed_ = false;
  ConsumerStatistics stats_;
};

}  // namespace ddo::consumer

#endif  // DDO_CLIENT_CONSUMER_RING_CONSUMER_H_
