// File: client-cpp/src/consumer/control_block.cc
#include "client-cpp/src/consumer/control_block.h"

#include <chrono>
#include <cstdio>
#include <utility>

#include "client-cpp/src/consumer/daemon_liveness.h"
#include "ddo/status.h"
#include "ddo/wire/futex.h"

namespace ddo::consumer {
namespace {

// Python's f"{value:#010x}" (C's "%#010x" drops the 0x of zero).
std::string Hex32(uint32_t value) {
  char text[16];
  std::snprintf(text, sizeof(text), "0x%08x", value);
  return text;
}

// Python's f"{value:g}".
std::string Shortest(double value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g", value);
  return text;
}

// Clears runner_waiting however the wait ends (Python's `finally`).
class WaitingFlag {
 public:
  explicit WaitingFlag(std::atomic<uint32_t>& word) : word_(word) {
    // seq_cst: ddod stores the counter, then loads runner_waiting (ControlBlock::WakeRunner);
    // the runner stores runner_waiting, then re-reads the counter. One of them sees the other.
    word_.store(1, std::memory_order_seq_cst);
  }
  ~WaitingFlag() { word_.store(0, std::memory_order_release); }
  WaitingFlag(const WaitingFlag&) = delete;
  WaitingFlag& operator=(const WaitingFlag&) = delete;

 private:
  std::atomic<uint32_t>& word_;
};

}  // namespace

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

Doorbell::Doorbell(uint8_t* base, uint64_t size, std::string name) : view_{base} {
  if (base == nullptr || size < doorbell_layout::kBytes) {
    throw Error(StatusCode::kFailedPrecondition,
                "the doorbell " + name + " has " + std::to_string(size) + " bytes; it needs " +
                    std::to_string(doorbell_layout::kBytes));
  }
  const uint32_t magic = view_.magic().load(std::memory_order_acquire);
  if (magic != doorbell_layout::kMagic) {
    throw Error(StatusCode::kFailedPrecondition, "the doorbell " + name + " has magic " +
                                                     Hex32(magic) + ", not " +
                                                     Hex32(doorbell_layout::kMagic));
  }
}

void Doorbell::Ring() {
  view_.seq().fetch_add(1, std::memory_order_release);
  FutexWakeAll(&view_.seq());
}

void Doorbell::RingIfSleeping() {
  // The caller just published a counter with a release store; ddod stores daemon_sleeping,
  // then reads the counters. The fence orders our store before this load (store-load), so
  // either ddod sees the counter or we see it sleeping.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (view_.daemon_sleeping().load(std::memory_order_relaxed) != 0) Ring();
}

ControlBlock::ControlBlock(uint8_t* base, uint64_t size, std::string name,
                           int64_t stall_timeout_ns, int64_t daemon_pid)
    : view_{base, 0}, name_(std::move(name)), stall_timeout_ns_(stall_timeout_ns) {
  if (base == nullptr || size < control_layout::kSlotUseOffset) {
    throw Error(StatusCode::kFailedPrecondition,
                "the control block " + name_ + " has " + std::to_string(size) +
                    " bytes; it needs at least " + std::to_string(control_layout::kSlotUseOffset));
  }
  // The magic first, with acquire: ddod stores it last, after the rest of the header.
  const uint32_t magic = view_.magic().load(std::memory_order_acquire);
  if (magic != control_layout::kMagic) {
    throw Error(StatusCode::kFailedPrecondition, "the control block " + name_ + " has magic " +
                                                     Hex32(magic) + ", not " +
                                                     Hex32(control_layout::kMagic));
  }
  const uint32_t version = view_.version().load(std::memory_order_relaxed);
  if (version != control_layout::kVersion) {
    throw Error(StatusCode::kFailedPrecondition,
                "the control block " + name_ + " has layout version " + std::to_string(version) +
                    "; this client reads version " + std::to_string(control_layout::kVersion) +
                    " (update the client or ddod)");
  }
  const uint32_t slots = view_.slots_word().load(std::memory_order_relaxed);
  const uint64_t needed = control_layout::LayoutBytes(slots);
  if (slots < 1 || size < needed) {
    throw Error(StatusCode::kFailedPrecondition,
                "the control block " + name_ + " has " + std::to_string(size) + " bytes for K=" +
                    std::to_string(slots) + " slots; it needs " + std::to_string(needed));
  }
  view_.slots = slots;
  units_ = view_.units().load(std::memory_order_relaxed);
  arena_bytes_ = view_.arena_bytes().load(std::memory_order_relaxed);
  daemon_pid_ = daemon_pid >= 0 ? daemon_pid : view_.daemon_pid().load(std::memory_order_relaxed);
  check_pid_ = daemon_pid_ > 0 && ProcessAlive(daemon_pid_);
}

void ControlBlock::CheckMatches(uint32_t slots, uint32_t units, uint64_t arena_bytes) const {
  if (view_.slots == slots && units_ == units && arena_bytes_ == arena_bytes) return;
  throw Error(StatusCode::kFailedPrecondition,
              "the control block says K=" + std::to_string(view_.slots) + ", " +
                  std::to_string(units_) + " units and a " + std::to_string(arena_bytes_) +
                  "-byte arena, the Attach answer K=" + std::to_string(slots) + ", " +
                  std::to_string(units) + " units and " + std::to_string(arena_bytes) + " bytes");
}

int64_t ControlBlock::WaitUntil(const std::atomic<uint64_t>& word, uint64_t target,
                                const char* what) {
  if (word.load(std::memory_order_acquire) >= target) return 0;
  const int64_t started = NowNs();
  const int64_t spin_until = started + kSpinNs;
  while (NowNs() < spin_until) {
    if (word.load(std::memory_order_acquire) >= target) return NowNs() - started;
  }
  uint64_t last_value = word.load(std::memory_order_acquire);
  int64_t last_progress = NowNs();
  int64_t last_pid_check = last_progress;
  WaitingFlag waiting(view_.runner_waiting());
  while (true) {
    const uint64_t value = word.load(std::memory_order_seq_cst);
    if (value >= target) return NowNs() - started;
    const int64_t now = NowNs();
    CheckState();
    if (check_pid_ && now - last_pid_check >= kPidCheckNs) {
      CheckDaemon();
      last_pid_check = now;
    }
    if (value != last_value) {
      last_value = value;
      last_progress = now;
    } else if (now - last_progress > stall_timeout_ns_) {
      throw StreamingError(StatusCode::kDeadlineExceeded,
                           "ddod made no progress for " + Shortest(stall_timeout_ns_ / 1e9) +
                               " s: " + what + " is " + std::to_string(value) +
                               ", the runner waits for " + std::to_string(target));
    }
    Sleep(LowWord(&word), static_cast<uint32_t>(value));
  }
}

void ControlBlock::Sleep(const std::atomic<uint32_t>* word, uint32_t expected) {
  if (!before_sleep_) {
    FutexWait(word, expected, kSliceNs);
    return;
  }
  before_sleep_();
  FutexWait(word, expected, kSliceNs);
  after_sleep_();
}

void ControlBlock::CheckState() const {
  const uint32_t state = view_.state().load(std::memory_order_acquire);
  switch (static_cast<SessionState>(state)) {
    case SessionState::kOpen:
      return;
    case SessionState::kClosed:
      throw SessionClosedError(
          StatusCode::kCancelled,
          "ddod closed this streaming session (it was detached, or ddod is stopping)");
    case SessionState::kFailed:
      throw SessionClosedError(
          StatusCode::kAborted,
          "ddod marked this streaming session failed (see ddod's log for the reason)");
  }
  throw SessionClosedError(StatusCode::kInternal,
                           "the session's control block has an unknown state " +
                               std::to_string(state));
}

void ControlBlock::CheckDaemon() const {
  if (check_pid_ && !ProcessAlive(daemon_pid_)) {
    throw DaemonGoneError(StatusCode::kUnavailable,
                          "ddod (pid " + std::to_string(daemon_pid_) +
                              ") is gone: its streaming session ended with it");
  }
}

void ControlBlock::CheckSlot(uint32_t slot, uint64_t expected, const char* what) const {
  const std::atomic<uint64_t>& word = view_.slot_use(slot);
  if (word.load(std::memory_order_acquire) == expected) return;
  const int64_t deadline = NowNs() + kSlotRecheckNs;
  while (NowNs() < deadline) {
    if (word.load(std::memory_order_acquire) == expected) return;
  }
  const std::string held = std::to_string(word.load(std::memory_order_acquire));
  throw StreamingError(StatusCode::kDataLoss,
                       "slot " + std::to_string(slot) + " of the ring holds " + what + " " + held +
                           ", but " + what + " " + std::to_string(expected) +
                           " was published: refusing to compute with the wrong weights");
}

}  // namespace ddo::consumer
