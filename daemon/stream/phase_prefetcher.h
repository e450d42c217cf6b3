// File: daemon/stream/phase_prefetcher.h
//
// A pipeline phase begins (docs/streaming.md §6): the caller's warm slabs of components the
// phase does not keep are freed, and for each component it prefetches that had a session
// before, a slab of its last placement (the recipe DeviceTable kept) is filled on that device
// when ddod's budget there has room, so that its next Attach finds it warm.
//
// Thread-safety: Begin may be called from any thread; the prefetcher keeps no state of its own
// (the store and the device table lock themselves; slab_in_use is called with no lock held).
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

namespace ddo {

struct PhaseResult {
  uint64_t released_bytes = 0;
  uint64_t prefetched_bytes = 0;
  std::vector<std::string> notes;  // what was released or warmed, and what could not be
};

class PhasePrefetcher {
 public:
  // Whether an open session holds the slab of WarmSlabCache key `slab_key`.
  using SlabInUse = std::function<bool(const std::string& slab_key)>;

  // `store` and `devices` must outlive the prefetcher.
  PhasePrefetcher(ComponentStore& store, DeviceTable& devices, SlabInUse slab_in_use);

  // `lease`'s phase keeps the components `keep` (cache keys) and prefetches `prefetch`. A
  // caller's phase releases and fills only slabs of its own components.
  PhaseResult Begin(const Lease& lease, const std::set<std::string>& keep,
                    const std::vector<std::string>& prefetch);

 private:
  // Fills a slab of `key`'s last placement for its next session; a note says how.
  std::string Prefetch(const Lease& lease, const std::string& key, uint64_t* prefetched_bytes);

  ComponentStore& store_;
  DeviceTable& devices_;
  const SlabInUse slab_in_use_;
};

}  // namespace ddo

#endif  // DDO_DAEMON_STREAM_PHASE_PREFETCHER_H_
