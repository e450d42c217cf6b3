// File: daemon/common/work_progress.h
//
// The progress of one long piece of work whose size grows with a component (reserving its
// pages, hashing or pinning its bytes): workers add the bytes they finished, a reporter reads
// them, and the reporter may ask the workers to stop early. It holds no lock; workers poll
// cancelled() between pieces of work.
//
// RunReportingProgress runs such work on a thread of its own while the caller's thread
// reports it: how a gRPC handler keeps a long call visibly alive for the client's stall
// watchdog, however long the work takes.
//
// Thread-safety: every method of WorkProgress may be called from any thread.
#ifndef DDO_DAEMON_COMMON_WORK_PROGRESS_H_
#define DDO_DAEMON_COMMON_WORK_PROGRESS_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <thread>
#include <utility>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace ddo {

class WorkProgress {
 public:
  WorkProgress() = default;
  WorkProgress(const WorkProgress&) = delete;
  WorkProgress& operator=(const WorkProgress&) = delete;

  // The bytes the work will have done when it ends; 0 while unknown.
  void SetTotal(uint64_t bytes) { total_.store(bytes, std::memory_order_relaxed); }
  uint64_t total() const { return total_.load(std::memory_order_relaxed); }

  void Add(uint64_t bytes) { done_.fetch_add(bytes, std::memory_order_relaxed); }
  uint64_t done() const { return done_.load(std::memory_order_relaxed); }

  // Asks the work to stop at its next check (the caller hung up, ddod stops).
  void Cancel() { cancelled_.store(true, std::memory_order_relaxed); }
  bool cancelled() const { return cancelled_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> total_{0};
  std::atomic<uint64_t> done_{0};
  std::atomic<bool> cancelled_{false};
};

// How often RunReportingProgress looks at the work, and the longest it stays silent.
struct ReportPacing {
  absl::Duration poll = absl::Milliseconds(100);
  absl::Duration heartbeat = absl::Milliseconds(500);
};

// Runs `work` on a new thread and returns its result. Meanwhile, on the calling thread,
// `report(done, total)` is called at once, then whenever `progress` advanced and at least every
// `pacing.heartbeat`; when `cancelled()` turns true, `progress` is cancelled (the work stops at
// its next check). The work never outlives the call: its result is always awaited.
template <typename Result>
Result RunReportingProgress(WorkProgress& progress, std::function<Result()> work,
                            const std::function<void(uint64_t done, uint64_t total)>& report,
                            const std::function<bool()>& cancelled, ReportPacing pacing = {}) {
  std::optional<Result> result;
  absl::Notification finished;
  std::thread worker([&] {
    result.emplace(work());
    finished.Notify();
  });
  uint64_t reported = progress.done();
  absl::Time last_report = absl::Now();
  report(reported, progress.total());
  while (!finished.WaitForNotificationWithTimeout(pacing.poll)) {
    if (!progress.cancelled() && cancelled()) progress.Cancel();
    const uint64_t done = progress.done();
    if (done != reported || absl::Now() - last_report >= pacing.heartbeat) {
      reported = done;
      last_report = absl::Now();
      report(done, progress.total());
    }
  }
  worker.join();
  return *std::move(result);
}

}  // namespace ddo

#endif  // DDO_DAEMON_COMMON_WORK_PROGRESS_H_
