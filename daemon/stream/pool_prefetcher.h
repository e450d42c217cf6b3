// File: daemon/stream/pool_prefetcher.h
//
// The pool step of a pipeline phase (docs/streaming.md §6): reads the components a phase
// prefetches back from their files into the host pool (ComponentStore::Promote), one after
// the other, on one background thread (a BackgroundQueue keyed by lease), so that the phase's
// answer does not wait for them. A lease has at most one such job: its next phase, or the end
// of the lease, cancels the one that runs (the promotion stops at its next chunk and leaves
// the component as it was).
//
// Thread-safety: every method may be called from any thread. The store's calls run on the
// queue's thread with no lock held.
#ifndef DDO_DAEMON_STREAM_POOL_PREFETCHER_H_
#define DDO_DAEMON_STREAM_POOL_PREFETCHER_H_

#include <functional>
#include <string>
#include <vector>

#include "daemon/common/background_queue.h"
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
  // Promotes `keys` of `caller` in order, until `cancelled()`.
  void Promote(const Caller& caller, const std::vector<std::string>& keys,
               const std::function<bool()>& cancelled);

  ComponentStore& store_;
  BackgroundQueue jobs_;  // keyed by lease id
};

}  // namespace ddo

#endif  // DDO_DAEMON_STREAM_POOL_PREFETCHER_H_
