// File: daemon/stream/control_block.h
//
// The per-session control block and the per-device doorbell: small shared-memory segments
// that ddod and a runner both map, through which the hot path runs without gRPC. The layout
// is part of the protocol (docs/streaming.md §3): fixed offsets, little-endian, each word
// written by one side only. Counters are 64-bit; futexes wait on their low 32 bits.
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

namespace ddo {

namespace control_layout {
inline constexpr uint32_t kMagic = 0x434F4444;  // "DDOC"
inline constexpr uint32_t kVersion = 2;
inline constexpr uint64_t kMagicOffset = 0;
inline constexpr uint64_t kVersionOffset = 4;
inline constexpr uint64_t kSlotsOffset = 8;
inline constexpr uint64_t kUnitsOffset = 12;
inline constexpr uint64_t kDaemonPidOffset = 16;
inline constexpr uint64_t kScheduleLengthOffset = 24;
inline constexpr uint64_t kArenaBytesOffset = 32;  // u64: the ring's arena (the sync slot follows)
inline constexpr uint64_t kReadyOffset = 64;
inline constexpr uint64_t kConsumedOffset = 128;
inline constexpr uint64_t kStateOffset = 192;
inline constexpr uint64_t kRunnerWaitingOffset = 196;
inline constexpr uint64_t kSyncRequestOffset = 256;
inline constexpr uint64_t kSyncUnitOffset = 264;
inline constexpr uint64_t kSyncDoneOffset = 320;
inline constexpr uint64_t kSkippedUsesOffset = 384;
inline constexpr uint64_t kSyncUsesOffset = 392;
inline constexpr uint64_t kConsumedUsesOffset = 400;
inline constexpr uint64_t kSlotUseOffset = 1024;  // u64[slots + 1]; then slot_offset u64[slots + 1]
inline constexpr uint64_t kNoUse = ~0ull;
}  // namespace control_layout

namespace doorbell_layout {
inline constexpr uint32_t kMagic = 0x424F4444;  // "DDOB"
inline constexpr uint64_t kSeqOffset = 64;
inline constexpr uint64_t kDaemonSleepingOffset = 128;
inline constexpr uint64_t kBytes = 4096;
}  // namespace doorbell_layout

enum class SessionState : uint32_t { kOpen = 0, kClosed = 1, kFailed = 2 };

// Futex operations on a word of a shared mapping (not process-private).
// Returns when *word != expected, when woken, or after `timeout`.
void FutexWait(const std::atomic<uint32_t>* word, uint32_t expected, absl::Duration timeout);
void FutexWakeAll(const std::atomic<uint32_t>* word);

// The low 32 bits of a 64-bit counter, as a futex word (little-endian).
inline const std::atomic<uint32_t>* LowWord(const std::atomic<uint64_t>* counter) {
  return reinterpret_cast<const std::atomic<uint32_t>*>(counter);
}

class ControlBlock {
 public:
  // Creates the segment `name` for a session with `slots` streaming slots (plus the
  // out-of-schedule slot, at `arena_bytes` in the ring) and `units` units.
  static absl::StatusOr<ControlBlock> Create(const std::string& name, uint32_t slots,
                                             uint32_t units, uint64_t arena_bytes);
  // Bytes of the layout for `slots` streaming slots (before rounding to the segment size).
  static uint64_t LayoutBytes(uint32_t slots);

  ControlBlock(ControlBlock&&) noexcept = default;
  ControlBlock& operator=(ControlBlock&&) = delete;
  // Unmaps and removes the segment from /dev/shm.
  ~ControlBlock();

  const std::string& name() const { return segment_.name(); }
  uint64_t size() const { return segment_.size(); }
  uint32_t slots() const { return slots_; }

  // ddod's words.
  std::atomic<uint64_t>& ready() { return U64(control_layout::kReadyOffset); }
  std::atomic<uint64_t>& sync_done() { return U64(control_layout::kSyncDoneOffset); }
  std::atomic<uint64_t>& slot_use(uint32_t slot) {
    return U64(control_layout::kSlotUseOffset + 8ull * slot);
  }
  // Where in the ring the slot's unit lies; written before its slot_use.
  std::atomic<uint64_t>& slot_offset(uint32_t slot) {
    return U64(control_layout::kSlotUseOffset + 8ull * (slots_ + 1 + slot));
  }
  void set_schedule_length(uint32_t length);
  void set_state(SessionState state);
  SessionState state() { return static_cast<SessionState>(U32(control_layout::kStateOffset).load()); }

  // The runner's words.
  std::atomic<uint64_t>& consumed() { return U64(control_layout::kConsumedOffset); }
  std::atomic<uint32_t>& runner_waiting() { return U32(control_layout::kRunnerWaitingOffset); }
  std::atomic<uint64_t>& sync_request() { return U64(control_layout::kSyncRequestOffset); }
  std::atomic<uint32_t>& sync_unit() { return U32(control_layout::kSyncUnitOffset); }
  uint64_t skipped_uses() { return U64(control_layout::kSkippedUsesOffset).load(); }
  uint64_t sync_uses() { return U64(control_layout::kSyncUsesOffset).load(); }
  uint64_t consumed_uses() { return U64(control_layout::kConsumedUsesOffset).load(); }

  // Wakes a runner sleeping on ready or sync_done, if it says it sleeps.
  void WakeRunner();

 private:
  ControlBlock(SharedSegment segment, uint32_t slots)
      : segment_(std::move(segment)), slots_(slots) {}
  std::atomic<uint64_t>& U64(uint64_t offset) {
    return *reinterpret_cast<std::atomic<uint64_t>*>(segment_.data() + offset);
  }
  std::atomic<uint32_t>& U32(uint64_t offset) {
    return *reinterpret_cast<std::atomic<uint32_t>*>(segment_.data() + offset);
  }

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
  std::atomic<uint32_t>& seq() {
    return *reinterpret_cast<std::atomic<uint32_t>*>(segment_.data() + doorbell_layout::kSeqOffset);
  }
  std::atomic<uint32_t>& sleeping() {
    return *reinterpret_cast<std::atomic<uint32_t>*>(segment_.data() +
                                                     doorbell_layout::kDaemonSleepingOffset);
  }

  SharedSegment segment_;
};

}  // namespace ddo

#endif  // DDO_DAEMON_STREAM_CONTROL_BLOCK_H_
