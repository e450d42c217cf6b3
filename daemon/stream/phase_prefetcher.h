// File: daemon/stream/phase_prefetcher.h
//
// A pipeline phase begins (docs/streaming.md §6): the caller's warm slabs of components the
// phase does not keep are freed, and for each component it prefetches that had a session
// before, a slab of its last placement (the recipe DeviceTable kept) is filled on that device
// when ddod's budget there has room, so that its next Attach finds it warm. The pool step
// (unless the caller keeps the pool as it is): for needed and prefetched components on the
// file tier, the caller's own unused components outside the phase are demoted to their files
// while the pool lacks room for them; the needed ones are read back into the pool before
// Begin returns (a session reads the tier it finds when it opens: a promotion finished later
// would help only the next run), the prefetched ones in the background (PoolPrefetcher).
// Only a denoising phase demotes other components for room (PoolStep::kDemoteForRoom): its
// component runs once a step, so bytes moved into the pool are read from it many times. A
// prompt or decode pass runs its components once: reading them from their files once costs
// no more than reading them into the pool, and demoting the denoiser for them would cost its
// re-read at the next denoising phase (the consumer run, docs/benchmarks.md). Those phases
// promote into free room only (PoolStep::kIntoFreeRoom).
//
// Thread-safety: Begin and CancelLease may be called from any thread; the prefetcher keeps no
// state of its own beside the PoolPrefetcher (the store, the device table and the pool
// prefetcher lock themselves; slab_in_use is called with no lock held).
#ifndef DDO_DAEMON_STREAM_PHASE_PREFETCHER_H_
#define DDO_DAEMON_STREAM_PHASE_PREFETCHER_H_

#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "daemon/session/lease_registry.h"
#include "daemon/store/component_store.h"
#include "daemon/stream/device_table.h"
#include "daemon/stream/pool_prefetcher.h"

namespace ddo {

// What a phase's pool step may do (docs/architecture.md, "Phases under a RAM budget").
enum class PoolStep {
  kNone,            // the caller keeps the pool as it is (PhaseRequest.keep_pool_bytes)
  kIntoFreeRoom,    // promote needed and prefetched components into free room only
  kDemoteForRoom,   // also demote the caller's other unused components to make room
};

struct PhaseResult {
  uint64_t released_bytes = 0;
  uint64_t prefetched_bytes = 0;
  uint64_t demoted_bytes = 0;    // pool bytes of the caller's components sent to their files
  uint64_t promoting_bytes = 0;  // pool bytes being read back in the background
  uint64_t promoted_bytes = 0;   // pool bytes of needed components read back by Begin
  std::vector<std::string> notes;  // what was released or warmed, and what could not be
};

class PhasePrefetcher {
 public:
  // Whether an open session holds the slab of WarmSlabCache key `slab_key`.
  using SlabInUse = std::function<bool(const std::string& slab_key)>;

  // `store` and `devices` must outlive the prefetcher.
  PhasePrefetcher(ComponentStore& store, DeviceTable& devices, SlabInUse slab_in_use);

  // `lease`'s phase keeps the components `keep` (cache keys: `needed` and `prefetch`), runs
  // `needed` and prefetches `prefetch`. A caller's phase releases and fills only slabs of its
  // own components. `pool_step`: what the pool step may move.
  PhaseResult Begin(const Lease& lease, const std::set<std::string>& keep,
                    const std::vector<std::string>& needed,
                    const std::vector<std::string>& prefetch,
                    PoolStep pool_step = PoolStep::kDemoteForRoom);
  // The lease ended: its background promotion stops.
  void CancelLease(const std::string& lease_id) { pool_.CancelLease(lease_id); }
  // ddod stops: every background promotion stops.
  void StopPool() { pool_.Stop(); }
  // Waits for the background promotions (tests).
  void WaitPoolIdle() { pool_.WaitIdle(); }

 private:
  // The pool step of Begin: demotions and the needed components' promotions now, the
  // prefetched ones' started in the background.
  void MovePoolBytes(const Lease& lease, const std::set<std::string>& keep,
                     const std::vector<std::string>& needed,
                     const std::vector<std::string>& prefetch, PoolStep pool_step,
                     PhaseResult& result);
  // The caller's file-tier components among `keys` (each once) and the pool bytes their
  // promotions ask for, margin included; adds them to `*bytes`.
  std::vector<std::string> ToPromote(const Lease& lease, const std::vector<std::string>& keys,
                                     uint64_t* bytes) const;
  // Demotes the caller's components outside `keep` until the pool has `bytes` free.
  void DemoteForRoom(const Lease& lease, const std::set<std::string>& keep, uint64_t bytes,
                     PhaseResult& result);

  // Fills a slab of `key`'s last placement for its next session; a note says how.
  std::string Prefetch(const Lease& lease, const std::string& key, uint64_t* prefetched_bytes);

  ComponentStore& store_;
  DeviceTable& devices_;
  const SlabInUse slab_in_use_;
  PoolPrefetcher pool_;
};

}  // namespace ddo

#endif  // DDO_DAEMON_STREAM_PHASE_PREFETCHER_H_
