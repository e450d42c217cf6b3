// File: client-cpp/src/rpc/stall_watchdog.h
//
// Calls `on_stall` once when Progress() has not been called for `limit_seconds`: how a long
// server stream (LoadSafetensors) without a deadline still ends when ddod stops reporting
// (the Python client's store._Watchdog).
//
// Thread-safety: Progress() from the reading thread; the destructor joins the watchdog thread.
#ifndef DDO_CLIENT_RPC_STALL_WATCHDOG_H_
#define DDO_CLIENT_RPC_STALL_WATCHDOG_H_

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>

namespace ddo {

class StallWatchdog {
 public:
  StallWatchdog(double limit_seconds, std::function<void()> on_stall)
      : limit_(std::chrono::duration_cast<Clock::duration>(
            std::chrono::duration<double>(limit_seconds))),
        on_stall_(std::move(on_stall)),
        last_(Clock::now()),
        thread_([this] { Watch(); }) {}
  StallWatchdog(const StallWatchdog&) = delete;
  StallWatchdog& operator=(const StallWatchdog&) = delete;
  ~StallWatchdog() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      done_ = true;
    }
    changed_.notify_all();
    thread_.join();
  }

  void Progress() {
    std::lock_guard<std::mutex> lock(mutex_);
    last_ = Clock::now();
  }

  // True once on_stall ran.
  bool fired() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return fired_;
  }

 private:
  using Clock = std::chrono::steady_clock;

  void Watch() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!done_) {
      const Clock::time_point deadline = last_ + limit_;
      if (Clock::now() >= deadline) {
        fired_ = true;
        lock.unlock();
        on_stall_();
        return;
      }
      changed_.wait_until(lock, deadline);
    }
  }

  const Clock::duration limit_;
  const std::function<void()> on_stall_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  Clock::time_point last_;  // guarded by mutex_
  bool done_ = false;       // guarded by mutex_
  bool fired_ = false;      // guarded by mutex_
  std::thread thread_;      // last: starts once the fields above exist
};

}  // namespace ddo

#endif  // DDO_CLIENT_RPC_STALL_WATCHDOG_H_
