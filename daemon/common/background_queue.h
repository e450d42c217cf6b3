// File: daemon/common/background_queue.h
//
// One background thread that runs queued jobs one after the other, so that no request waits
// for them: the store's spills of uploads (ComponentStore::QueueSpillsLocked) and the
// promotions a pipeline phase prefetches (stream/pool_prefetcher.h). Every job has a key; a key is queued at most
// once among the jobs not cancelled, and jobs are cancelled by key: a cancelled job that is
// queued is dropped, one that runs sees its `cancelled()` turn true and stops at its next
// chunk. The thread starts with the first job.
//
// Thread-safety: every method may be called from any thread; mu_ guards the queue and the
// running job. Jobs run on the thread with no lock held, and must not call back into the
// queue that runs them.
#ifndef DDO_DAEMON_COMMON_BACKGROUND_QUEUE_H_
#define DDO_DAEMON_COMMON_BACKGROUND_QUEUE_H_

#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace ddo {

class BackgroundQueue {
 public:
  // The job itself; `cancelled()` turns true when it is cancelled or the queue stops.
  using Work = std::function<void(const std::function<bool()>& cancelled)>;
  // Which keys a call means.
  using KeyMatch = std::function<bool(const std::string& key)>;

  BackgroundQueue() = default;
  BackgroundQueue(const BackgroundQueue&) = delete;
  BackgroundQueue& operator=(const BackgroundQueue&) = delete;
  ~BackgroundQueue() { Stop(); }

  // Queues `work` under `key`: false, with nothing queued, when a job of that key is queued
  // or running and not cancelled, or the queue stopped.
  bool Enqueue(std::string key, Work work);
  // Drops the queued jobs whose key matches and cancels the running one if its key does.
  void Cancel(const KeyMatch& matches);
  // Cancel, then waits until no job whose key matches runs.
  void CancelAndWait(const KeyMatch& matches);
  // Drops the queue, cancels the running job, waits for it and joins; Enqueue does nothing
  // afterwards.
  void Stop();
  // Waits until nothing is queued or running (tests).
  void WaitIdle();

 private:
  struct Job {
    std::string key;
    Work work;
    std::shared_ptr<std::atomic<bool>> cancelled = std::make_shared<std::atomic<bool>>(false);
  };
  void Run();
  void CancelLocked(const KeyMatch& matches) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Mutex mu_;
  std::deque<Job> queue_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<Job> running_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // started by the first Enqueue, under mu_
};

}  // namespace ddo

#endif  // DDO_DAEMON_COMMON_BACKGROUND_QUEUE_H_
