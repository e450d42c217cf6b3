// File: daemon/stream/pool_prefetcher.h
//
// The pool step of a pipeline phase (docs/streaming.md §6): reads the components a phase
// prefetches back from their files into the host pool (ComponentStore::Promote), one after
// the other, on one background thread, so that the phase's answer does not wait for them. A
// lease has at most one such job: its next phase, or the end of the lease, cancels the one
// that runs (the promotion stops at its next chunk and leaves the component as it was).
//
// Thread-safety: Start, CancelLease and Stop may be called from any thread; mu_ guards the
// queue and the running job's lease. The store's calls run on the thread with no lock held.
#ifndef DDO_DAEMON_STREAM_POOL_PREFETCHER_H_
#define DDO_DAEMON_STREAM_POOL_PREFETCHER_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "daemon/identity/caller.h"
#include "daemon/store/component_store.h"

namespace ddo {

class PoolPrefetcher {
 public:
  // `store` must outlive the prefetcher.
  explicit PoolPrefetcher(ComponentStore& store);
  PoolPrefetcher(const PoolPrefetcher&) = delete;
  PoolPrefetcher& operator=(const PoolPrefetcher&) = delete;
  ~PoolPrefetcher();  // Stop()

  // Promotes `keys` (the caller's cache keys), in order, in the background; cancels the
  // lease's job that is queued or running. The thread starts with the first job.
  void Start(const std::string& lease_id, const Caller& caller, std::vector<std::string> keys);
  // Cancels the lease's job (its lease ended).
  void CancelLease(const std::string& lease_id);
  // Cancels the lease's job and waits until it no longer runs (its next phase promotes
  // components itself, and two promotions of one component do not run at once).
  void CancelLeaseAndWait(const std::string& lease_id);
  // Cancels every job and joins the thread; Start does nothing afterwards.
  void Stop();
  // Waits until no job is queued or running (tests).
  void WaitIdle();

 private:
  struct Job {
    std::string lease_id;
    Caller caller;
    std::vector<std::string> keys;
    std::shared_ptr<std::atomic<bool>> cancelled;
  };
  void Run();
  void RunJob(const Job& job);
  // Cancels the queued and running jobs of `lease_id`; with mu_ held.
  void CancelLocked(const std::string& lease_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  ComponentStore& store_;
  absl::Mutex mu_;
  std::deque<Job> queue_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<Job> running_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // started by the first Start, under mu_
};

}  // namespace ddo

#endif  // DDO_DAEMON_STREAM_POOL_PREFETCHER_H_
