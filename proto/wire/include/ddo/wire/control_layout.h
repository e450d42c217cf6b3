// File: proto/wire/include/ddo/wire/control_layout.h
//
// The per-session control block and the per-device doorbell as laid out in shared memory: the
// byte layout both ddod and a runner map (docs/streaming.md §3). Fixed offsets, little-endian,
// each word written by one side only. Counters are 64-bit; futexes wait on their low 32 bits.
// ddod owns the segments (daemon/stream/control_block.h); a runner maps them and reads them
// through ControlView and DoorbellView. Header-only, no dependencies beyond the standard
// library: ddod, the C++ client and the Python extension all compile it.
//
// Thread-safety: the accessors return std::atomic words over the mapping; each word has one
// writer (see docs/streaming.md for which side writes which).
#ifndef DDO_WIRE_CONTROL_LAYOUT_H_
#define DDO_WIRE_CONTROL_LAYOUT_H_

#include <atomic>
#include <cstdint>

namespace ddo {

// Both processes address the same words: a lock-based atomic would lock a private mutex.
static_assert(sizeof(std::atomic<uint64_t>) == 8 && std::atomic<uint64_t>::is_always_lock_free,
              "the control block needs lock-free 64-bit atomics");
static_assert(sizeof(std::atomic<uint32_t>) == 4 && std::atomic<uint32_t>::is_always_lock_free,
              "the control block needs lock-free 32-bit atomics");

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

// Bytes of the layout for `slots` streaming slots (before rounding to the segment size).
inline constexpr uint64_t LayoutBytes(uint32_t slots) {
  return kSlotUseOffset + 16ull * (uint64_t{slots} + 1);
}
}  // namespace control_layout

namespace doorbell_layout {
inline constexpr uint32_t kMagic = 0x424F4444;  // "DDOB"
inline constexpr uint64_t kSeqOffset = 64;
inline constexpr uint64_t kDaemonSleepingOffset = 128;
inline constexpr uint64_t kBytes = 4096;
}  // namespace doorbell_layout

enum class SessionState : uint32_t { kOpen = 0, kClosed = 1, kFailed = 2 };

// Typed words of a mapped control block with `slots` streaming slots. A view owns nothing: the
// mapping must outlive it.
struct ControlView {
  uint8_t* base = nullptr;
  uint32_t slots = 0;

  std::atomic<uint32_t>& U32(uint64_t offset) const {
    return *reinterpret_cast<std::atomic<uint32_t>*>(base + offset);
  }
  std::atomic<uint64_t>& U64(uint64_t offset) const {
    return *reinterpret_cast<std::atomic<uint64_t>*>(base + offset);
  }

  // The header, written once by ddod before the magic.
  std::atomic<uint32_t>& magic() const { return U32(control_layout::kMagicOffset); }
  std::atomic<uint32_t>& version() const { return U32(control_layout::kVersionOffset); }
  std::atomic<uint32_t>& slots_word() const { return U32(control_layout::kSlotsOffset); }
  std::atomic<uint32_t>& units() const { return U32(control_layout::kUnitsOffset); }
  std::atomic<int64_t>& daemon_pid() const {
    return *reinterpret_cast<std::atomic<int64_t>*>(base + control_layout::kDaemonPidOffset);
  }
  std::atomic<uint64_t>& arena_bytes() const { return U64(control_layout::kArenaBytesOffset); }

  // ddod's words.
  std::atomic<uint32_t>& schedule_length() const {
    return U32(control_layout::kScheduleLengthOffset);
  }
  std::atomic<uint64_t>& ready() const { return U64(control_layout::kReadyOffset); }
  std::atomic<uint32_t>& state() const { return U32(control_layout::kStateOffset); }
  std::atomic<uint64_t>& sync_done() const { return U64(control_layout::kSyncDoneOffset); }
  // The use (slot `slots`: the request) the slot holds; written after its slot_offset.
  std::atomic<uint64_t>& slot_use(uint32_t slot) const {
    return U64(control_layout::kSlotUseOffset + 8ull * slot);
  }
  // Where in the ring the slot's unit lies.
  std::atomic<uint64_t>& slot_offset(uint32_t slot) const {
    return U64(control_layout::kSlotUseOffset + 8ull * (uint64_t{slots} + 1 + slot));
  }

  // The runner's words.
  std::atomic<uint64_t>& consumed() const { return U64(control_layout::kConsumedOffset); }
  std::atomic<uint32_t>& runner_waiting() const {
    return U32(control_layout::kRunnerWaitingOffset);
  }
  std::atomic<uint64_t>& sync_request() const { return U64(control_layout::kSyncRequestOffset); }
  std::atomic<uint32_t>& sync_unit() const { return U32(control_layout::kSyncUnitOffset); }
  std::atomic<uint64_t>& skipped_uses() const { return U64(control_layout::kSkippedUsesOffset); }
  std::atomic<uint64_t>& sync_uses() const { return U64(control_layout::kSyncUsesOffset); }
  std::atomic<uint64_t>& consumed_uses() const {
    return U64(control_layout::kConsumedUsesOffset);
  }
};

// Typed words of a mapped doorbell.
struct DoorbellView {
  uint8_t* base = nullptr;

  std::atomic<uint32_t>& magic() const {
    return *reinterpret_cast<std::atomic<uint32_t>*>(base);
  }
  // The futex word ddod's copy worker sleeps on; a runner increments it to wake the worker.
  std::atomic<uint32_t>& seq() const {
    return *reinterpret_cast<std::atomic<uint32_t>*>(base + doorbell_layout::kSeqOffset);
  }
  // Nonzero while the worker sleeps (or is about to).
  std::atomic<uint32_t>& daemon_sleeping() const {
    return *reinterpret_cast<std::atomic<uint32_t>*>(base +
                                                     doorbell_layout::kDaemonSleepingOffset);
  }
};

}  // namespace ddo

#endif  // DDO_WIRE_CONTROL_LAYOUT_H_
