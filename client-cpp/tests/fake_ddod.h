// File: client-cpp/tests/fake_ddod.h
//
// ddod's side of a streaming session for the consumer tests: a control block and a doorbell
// in anonymous shared mappings, laid out with ddo/wire/control_layout.h as ddod lays them out
// (daemon/stream/control_block.cc), and a thread playing ddod's copy worker
// (docs/streaming.md §4): it serves out-of-schedule requests into slot K, produces the uses of
// the schedule it knows while they are fewer than K ahead of `consumed` (jumping to `consumed`
// when the runner skips ahead), and sleeps on the doorbell, announcing it in daemon_sleeping,
// when there is nothing to do.
//
// Thread-safety: a FakeDdod is driven by the test's thread while its worker thread runs; the
// schedule and the served units are guarded by mutex_, the rest are atomics or shared-memory
// words used as ddod uses them.
#ifndef DDO_CLIENT_CPP_TESTS_FAKE_DDOD_H_
#define DDO_CLIENT_CPP_TESTS_FAKE_DDOD_H_

#include <atomic>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "ddo/wire/control_layout.h"

namespace ddo::consumer {

// An anonymous MAP_SHARED mapping (what a /dev/shm segment is to both processes); unmapped on
// destruction.
class SharedMapping {
 public:
  explicit SharedMapping(uint64_t size);
  ~SharedMapping();
  SharedMapping(const SharedMapping&) = delete;
  SharedMapping& operator=(const SharedMapping&) = delete;

  uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }

 private:
  uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
};

class FakeDdod {
 public:
  // A block for `slots` streaming slots and `units` units, with daemon_pid = this process.
  FakeDdod(uint32_t slots, uint32_t units, uint64_t arena_bytes);
  // Stops the worker thread.
  ~FakeDdod();
  FakeDdod(const FakeDdod&) = delete;
  FakeDdod& operator=(const FakeDdod&) = delete;

  ControlView control() const { return ControlView{control_.data(), slots_}; }
  DoorbellView doorbell() const { return DoorbellView{doorbell_.data()}; }
  uint64_t control_bytes() const { return control_.size(); }
  uint64_t doorbell_bytes() const { return doorbell_.size(); }
  uint64_t arena_bytes() const { return arena_bytes_; }

  // Where use `use` lies in the ring: a 256-aligned place per slot.
  uint64_t PlaceOf(uint64_t use) const { return (use % slots_) * (arena_bytes_ / slots_); }

  // Starts the worker thread; it serves requests, and produces uses once it knows a schedule.
  void Start();
  void Stop();
  // What ddod learns through SetSchedule: from now on it produces the schedule's uses from 0.
  void SetSchedule(std::vector<uint32_t> schedule);
  // While paused the worker does nothing (a stalled copy).
  void Pause(bool paused) { paused_.store(paused); }
  // Publishes slot_use values that disagree with the published use (wrong weights).
  void PublishWrongSlotUse(bool wrong) { wrong_slot_use_.store(wrong); }
  // Sets the session's state and wakes a waiting runner, as ddod's ControlBlock::set_state.
  void SetState(SessionState state);

  // The units ddod served out of schedule, in order, and the highest use it produced + 1.
  std::vector<uint32_t> sync_units() const;
  uint64_t produced() const { return produced_.load(); }
  // The largest number of uses ever produced ahead of `consumed` (must stay <= K).
  uint64_t max_ahead() const { return max_ahead_.load(); }

 private:
  void Run();
  bool ServeRequest();
  bool Produce();
  void WakeRunner();

  uint32_t slots_;
  uint64_t arena_bytes_;
  SharedMapping control_;
  SharedMapping doorbell_;
  std::thread worker_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> paused_{false};
  std::atomic<bool> wrong_slot_use_{false};
  mutable std::mutex mutex_;
  std::vector<uint32_t> schedule_;   // guarded by mutex_
  std::vector<uint32_t> sync_units_;  // guarded by mutex_
  uint64_t next_use_ = 0;             // the worker's
  uint64_t sync_served_ = 0;          // the worker's
  std::atomic<uint64_t> produced_{0};
  std::atomic<uint64_t> max_ahead_{0};
};

}  // namespace ddo::consumer

#endif  // DDO_CLIENT_CPP_TESTS_FAKE_DDOD_H_
