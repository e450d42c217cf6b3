// File: client-cpp/src/consumer/control_block.h
//
// A streaming session's control block and its device's doorbell as the runner sees them: the
// port of py/control_block.py. Both are views over mappings the caller owns (the client maps
// the segments; the Python extension receives the addresses Python mapped), checked once at
// construction.
//
// Waiting (ControlBlock::WaitUntil) spins for 20 us, then sleeps on the counter's futex in
// slices of at most 2 ms. Between slices it checks the session's state and, every 100 ms,
// whether ddod's process still lives, so a runner never waits on a dead daemon or a closed
// session (DaemonGoneError, SessionClosedError); it gives up when ddod makes no progress for
// the stall timeout (StreamingError). The error texts are Python's, word for word.
//
// Memory order (docs/plans/issue-18-client-cpp.md §2): ddod's words are read with acquire
// loads (ddod writes slot_offset, then slot_use, then ready or sync_done); the runner's
// counters are published with release stores; runner_waiting and the re-check after it are
// sequentially consistent, the other half of ddod's WakeRunner.
//
// Thread-safety: none; one runner thread uses a session at a time.
#ifndef DDO_CLIENT_CONSUMER_CONTROL_BLOCK_H_
#define DDO_CLIENT_CONSUMER_CONTROL_BLOCK_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>

#include "ddo/wire/control_layout.h"

namespace ddo::consumer {

// How long a wait polls before it sleeps on the futex.
inline constexpr int64_t kSpinNs = 20'000;
// How long one futex sleep lasts at most; the liveness checks run between sleeps.
inline constexpr int64_t kSliceNs = 2'000'000;
// How often, at most, a wait checks ddod's process.
inline constexpr int64_t kPidCheckNs = 100'000'000;
// How long a mismatching slot_use is re-read before it is reported.
inline constexpr int64_t kSlotRecheckNs = 1'000'000;
// The default stall timeout: nanoseconds without progress before a wait gives up.
inline constexpr int64_t kDefaultStallTimeoutNs = 120'000'000'000;

// Monotonic nanoseconds (Python's time.perf_counter_ns).
int64_t NowNs();

// The device's doorbell: ddod's copy worker sleeps on `seq` when no session has work.
class Doorbell {
 public:
  // Checks the mapping's size and magic; ddo::Error (FAILED_PRECONDITION) otherwise. `name`
  // only names the segment in messages.
  Doorbell(uint8_t* base, uint64_t size, std::string name);

  // Increments seq and wakes the worker (a lost increment is harmless: the wake counts).
  void Ring();
  // Rings only when the worker sleeps: what a runner does after publishing `consumed`.
  void RingIfSleeping();

  DoorbellView view() const { return view_; }

 private:
  DoorbellView view_;
};

// One session's control block. ddod writes ready, state, sync_done, slot_use and slot_offset;
// the runner writes consumed, runner_waiting, sync_request, sync_unit and the statistics words.
class ControlBlock {
 public:
  // Checks magic, version and that `size` holds the slot arrays of the block's K; ddo::Error
  // (FAILED_PRECONDITION) otherwise. `daemon_pid` < 0 reads ddod's pid from the block. Its
  // process is watched only if it runs now (a ddod in another pid namespace has a pid this
  // process cannot see: then only `state` and the stall timeout end a wait).
  ControlBlock(uint8_t* base, uint64_t size, std::string name, int64_t stall_timeout_ns,
               int64_t daemon_pid = -1);

  // ddo::Error (FAILED_PRECONDITION) unless K, the unit count and the arena are the Attach
  // answer's.
  void CheckMatches(uint32_t slots, uint32_t units, uint64_t arena_bytes) const;

  uint32_t slots() const { return view_.slots; }
  uint32_t units() const { return units_; }
  int64_t daemon_pid() const { return daemon_pid_; }
  uint64_t arena_bytes() const { return arena_bytes_; }
  const ControlView& view() const { return view_; }

  // Waits until `word` (ready or sync_done) reaches `target`; returns the nanoseconds spent
  // waiting (0 when it already had). `what` names the word in the stall message.
  // Throws SessionClosedError, DaemonGoneError, StreamingError (stall).
  int64_t WaitUntil(const std::atomic<uint64_t>& word, uint64_t target, const char* what);
  // Runs `before` right before each futex sleep of a wait and `after` right after it (the
  // Python extension releases and retakes the GIL there, so other threads run meanwhile).
  void SetSleepHooks(std::function<void()> before, std::function<void()> after) {
    before_sleep_ = std::move(before);
    after_sleep_ = std::move(after);
  }
  // SessionClosedError unless the session is open.
  void CheckState() const;
  // DaemonGoneError when ddod's (watched) process has ended.
  void CheckDaemon() const;
  // StreamingError unless slot_use[slot] == expected; a mismatch is re-read for up to 1 ms
  // first, in case the store has not become visible yet. `what` is "use" or "request".
  void CheckSlot(uint32_t slot, uint64_t expected, const char* what) const;

 private:
  // One futex sleep of at most kSliceNs, inside the sleep hooks.
  void Sleep(const std::atomic<uint32_t>* word, uint32_t expected);

  ControlView view_;
  std::string name_;
  uint32_t units_ = 0;
  int64_t daemon_pid_ = 0;
  uint64_t arena_bytes_ = 0;
  int64_t stall_timeout_ns_ = kDefaultStallTimeoutNs;
  bool check_pid_ = false;
  std::function<void()> before_sleep_;
  std::function<void()> after_sleep_;
};

}  // namespace ddo::consumer

#endif  // DDO_CLIENT_CONSUMER_CONTROL_BLOCK_H_
