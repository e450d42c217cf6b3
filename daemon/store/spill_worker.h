// File: daemon/store/spill_worker.h
//
// The thread that spills uploads (ComponentStore::SpillUpload) after their commit, one after
// the other, so that no request waits for a disk write. Each (uid, cache key) is queued once
// until it ran.
//
// Thread-safety: Enqueue and Stop may be called from any thread; mu_ guards the queue. The
// job runs on the worker thread with no lock held.
#ifndef DDO_DAEMON_STORE_SPILL_WORKER_H_
#define DDO_DAEMON_STORE_SPILL_WORKER_H_

#include <sys/types.h>

#include <atomic>
#include <deque>
#include <functional>
#include <set>
#include <string>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace ddo {

class SpillWorker {
 public:
  // `cancelled()` turns true when the worker stops: a long write ends at its next chunk.
  using Job = std::function<void(uid_t uid, const std::string& cache_key,
                                 const std::function<bool()>& cancelled)>;
  explicit SpillWorker(Job job) : job_(std::move(job)) {}
  SpillWorker(const SpillWorker&) = delete;
  SpillWorker& operator=(const SpillWorker&) = delete;
  ~SpillWorker() { Stop(); }

  // Queues a spill (nothing when it is queued already or the worker stopped); starts the
  // thread with the first.
  void Enqueue(uid_t uid, const std::string& cache_key);
  // Drops the queue, cancels the running spill, waits for it and joins; Enqueue does nothing
  // afterwards.
  void Stop();
  // Waits until nothing is queued or running (tests).
  void WaitIdle();

 private:
  void Run();

  const Job job_;
  absl::Mutex mu_;
  std::deque<std::pair<uid_t, std::string>> queue_ ABSL_GUARDED_BY(mu_);
  std::set<std::pair<uid_t, std::string>> queued_ ABSL_GUARDED_BY(mu_);
  bool running_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::atomic<bool> cancelled_{false};  // read by the running job without mu_
  std::thread thread_;  // started by the first Enqueue, under mu_
};

}  // namespace ddo

#endif  // DDO_DAEMON_STORE_SPILL_WORKER_H_
