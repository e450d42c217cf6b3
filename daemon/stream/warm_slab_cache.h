// File: daemon/stream/warm_slab_cache.h
//
// The warm slabs of warm_process (DDO_CACHE_PINNED_WEIGHTS): a closed session's filled
// resident slab stays on its device, with its share of ddod's budget, for the next session of
// the same component bytes and placement; a Phase may prefetch one from the recipe the
// component's last session left. Slabs give way least recently used first when a session
// needs their room.
//
// Thread-safety: none; DeviceTable serialises every call under its own lock. What a call
// returns (slabs to free) is freed by the caller outside that lock.
#ifndef DDO_DAEMON_STREAM_WARM_SLAB_CACHE_H_
#define DDO_DAEMON_STREAM_WARM_SLAB_CACHE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "daemon/stream/device_budget.h"
#include "daemon/stream/resident_slab.h"
#include "daemon/layout/session_plan.h"

namespace ddo {

struct WarmSlab {
  std::string device;
  std::shared_ptr<ResidentSlab> slab;
  DeviceBudget::Reservation reservation;  // the slab's bytes in ddod's budget
  absl::Time last_used;
  std::string cache_key;
  bool prefetched = false;  // filled by a Phase for a coming session, not left by a closed one
  uid_t owner_uid = 0;      // cache keys are names inside their owner's uid
};

// Where a component's last session put its resident tensors: enough to fill a slab of it
// again before its next session (Phase prefetch).
struct SlabRecipe {
  std::string device;
  int ordinal = -1;               // -1: a host device
  uint64_t device_budget_bytes = 0;  // ddod's budget on that device then (0: none)
  std::string bytes_identity;     // SlabBytesIdentity of the component then
  std::string slab_signature;
  std::vector<PlannedTensor> resident;
  uint64_t slab_bytes = 0;
};

// Which bytes a slab is filled from: the component (a derived version is another component
// than its base, even where the resident tensors are unchanged) and its own segment (a key
// registered again gets a new one). A slab is reused only for the same bytes.
std::string SlabBytesIdentity(const std::string& component_id, const std::string& segment_name);

class WarmSlabCache {
 public:
  // The one key of a slab: "<device>|<bytes identity>|<slab signature>".
  static std::string Key(const std::string& device, const std::string& bytes_identity,
                         const std::string& slab_signature);

  // The slab kept under `key`, removed from the cache (its reservation with it); nullopt when
  // none is kept there.
  std::optional<WarmSlab> Take(const std::string& key);
  bool Contains(const std::string& key) const { return slabs_.count(key) != 0; }
  // Keeps `slab` under `key`. False when one is kept there already (`slab` is left as it was).
  bool Put(const std::string& key, WarmSlab& slab);

  // Removes the least recently used slab of `device`, sparing prefetched ones when asked;
  // nullopt when there is none to remove.
  std::optional<WarmSlab> TakeOldest(const std::string& device, bool spare_prefetched);
  // Removes every slab for which `which` is true.
  std::vector<WarmSlab> TakeIf(const std::function<bool(const WarmSlab&)>& which);
  std::vector<WarmSlab> TakeAll();
  size_t size() const { return slabs_.size(); }

  // The recipe of `cache_key`'s last session, replacing the one before.
  void Remember(const std::string& cache_key, SlabRecipe recipe);
  std::optional<SlabRecipe> RecipeOf(const std::string& cache_key) const;

 private:
  std::map<std::string, WarmSlab> slabs_;         // by Key()
  std::map<std::string, SlabRecipe> recipes_;    // by cache key
};

}  // namespace ddo

#endif  // DDO_DAEMON_STREAM_WARM_SLAB_CACHE_H_
