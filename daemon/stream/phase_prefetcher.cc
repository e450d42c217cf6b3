// File: daemon/stream/phase_prefetcher.cc
#include "daemon/stream/phase_prefetcher.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "daemon/common/format_bytes.h"

namespace ddo {

PhasePrefetcher::PhasePrefetcher(ComponentStore& store, DeviceTable& devices,
                                 SlabInUse slab_in_use)
    : store_(store), devices_(devices), slab_in_use_(std::move(slab_in_use)), pool_(store) {}

PhaseResult PhasePrefetcher::Begin(const Lease& lease, const std::set<std::string>& keep,
                                   const std::vector<std::string>& needed,
                                   const std::vector<std::string>& prefetch,
                                   PoolStep pool_step) {
  PhaseResult result;
  if (pool_step != PoolStep::kNone) {
    MovePoolBytes(lease, keep, needed, prefetch, pool_step, result);
  } else {
    pool_.CancelLease(lease.id);  // the previous phase's promotion ends with it
  }
  // A caller's phase releases only slabs of components it may read: another user's warm
  // slab is neither its to drop nor its to see named.
  std::vector<WarmSlab> released = devices_.TakeWarmIf([&](const WarmSlab& warm) {
    return warm.owner_uid == lease.caller.uid && keep.count(warm.cache_key) == 0;
  });
  for (const WarmSlab& warm : released) {
    result.released_bytes += warm.reservation.bytes();
    result.notes.push_back(absl::StrCat("released the warm slab of '", warm.cache_key, "' on ",
                                        warm.device, " (", FormatBytes(warm.reservation.bytes()),
                                        ")"));
  }
  released.clear();  // freed outside the table's lock
  for (const std::string& key : prefetch) {
    result.notes.push_back(absl::StrCat("'", key, "': ", Prefetch(lease, key,
                                                                  &result.prefetched_bytes)));
  }
  return result;
}

std::vector<std::string> PhasePrefetcher::ToPromote(const Lease& lease,
                                                    const std::vector<std::string>& keys,
                                                    uint64_t* bytes) const {
  // Only the caller's own components: PromotionBytes is 0 for a key it has not, so another
  // user's component under the same name is neither moved nor named.
  std::vector<std::string> promote;
  uint64_t margin = 0;
  for (const std::string& key : keys) {
    if (std::find(promote.begin(), promote.end(), key) != promote.end()) continue;
    const ComponentStore::PromotionNeed need = store_.PromotionBytes(key, lease.caller);
    if (need.bytes == 0) continue;
    promote.push_back(key);
    *bytes += need.bytes;
    margin = std::max(margin, need.margin);
  }
  if (!promote.empty()) *bytes += margin;
  return promote;
}

void PhasePrefetcher::DemoteForRoom(const Lease& lease, const std::set<std::string>& keep,
                                    uint64_t bytes, PhaseResult& result) {
  for (const ComponentStore::Demoted& demoted : store_.DemoteForRoom(lease.caller, bytes, keep)) {
    result.demoted_bytes += demoted.bytes;
    result.notes.push_back(absl::StrCat("'", demoted.cache_key, "': ",
                                        FormatBytes(demoted.bytes), " to its files"));
  }
}

void PhasePrefetcher::MovePoolBytes(const Lease& lease, const std::set<std::string>& keep,
                                    const std::vector<std::string>& needed,
                                    const std::vector<std::string>& prefetch,
                                    PoolStep pool_step, PhaseResult& result) {
  const bool may_demote = pool_step == PoolStep::kDemoteForRoom;
  // The previous phase's background promotion ends first: it may be reading a component
  // this phase promotes itself.
  pool_.CancelLeaseAndWait(lease.id);
  uint64_t needed_bytes = 0;
  for (const std::string& key : ToPromote(lease, needed, &needed_bytes)) {
    if (may_demote && store_.DemotingOthersHelps(key, lease.caller, keep)) {
      DemoteForRoom(lease, keep, needed_bytes, result);
    } else if (may_demote) {
      result.notes.push_back(absl::StrCat("'", key, "': your other components stay in the "
                                          "pool (their room would not let more of it in)"));
    }
    // A denoising phase's component is read once a step: what the room made for it holds
    // comes back even when all of it does not (split), as it must in a pool smaller than it
    // and its session margin.
    // A prompt or decode phase's comes back whole or not at all: for one pass, its files
    // serve as well, and a split now would need room for both parts to become whole later.
    absl::StatusOr<uint64_t> moved =
        store_.Promote(key, lease.caller, [] { return false; }, /*whole_only=*/!may_demote);
    if (moved.ok() && *moved > 0) {
      result.promoted_bytes += *moved;
      result.notes.push_back(absl::StrCat("'", key, "': ", FormatBytes(*moved),
                                          " read back into the pool for this phase"));
    } else if (moved.ok()) {
      result.notes.push_back(absl::StrCat("'", key, "' streams from its files in this phase: "
                                          "the pool has no room for ",
                                          may_demote ? "more of it" : "all of it"));
    } else {
      result.notes.push_back(absl::StrCat("'", key, "' stays in its files for this phase: ",
                                          moved.status().message()));
    }
  }
  std::vector<std::string> later;
  for (const std::string& key : prefetch) {
    if (std::find(needed.begin(), needed.end(), key) == needed.end()) later.push_back(key);
  }
  uint64_t prefetch_bytes = 0;
  std::vector<std::string> promote = ToPromote(lease, later, &prefetch_bytes);
  if (!promote.empty() && may_demote) DemoteForRoom(lease, keep, prefetch_bytes, result);
  for (const std::string& key : promote) {
    const uint64_t bytes = store_.PromotionBytes(key, lease.caller).bytes;
    result.promoting_bytes += bytes;
    result.notes.push_back(absl::StrCat(
        "'", key, "': ", may_demote ? "" : "up to ", FormatBytes(bytes),
        " read back into the pool in the background (what its free room holds)"));
  }
  pool_.Start(lease.id, lease.caller, std::move(promote));
}

std::string PhasePrefetcher::Prefetch(const Lease& lease, const std::string& key,
                                      uint64_t* prefetched_bytes) {
  std::optional<SlabRecipe> recipe = devices_.RecipeOf(absl::StrCat(lease.caller.uid, ":", key));
  // An unknown key and one without a recipe answer alike: a phase tells nothing of the keys
  // it cannot use.
  constexpr char kNothing[] = "no earlier session of yours shows its placement";
  if (!recipe) return kNothing;
  absl::StatusOr<HostAttachment> attached = store_.AttachHost(lease, key);
  if (!attached.ok()) return kNothing;
  absl::Cleanup detach = [&] { (void)store_.Detach(attached->session_id, lease.caller); };
  if (SlabBytesIdentity(attached->component.component_id, attached->component.segment_name) !=
      recipe->bytes_identity) {
    return "registered again since its last session: nothing to prefetch";
  }
  const std::string slab_key =
      WarmSlabCache::Key(recipe->device, recipe->bytes_identity, recipe->slab_signature);
  if (slab_in_use_(slab_key) || devices_.HasWarm(slab_key)) {
    return absl::StrCat("its slab is already on ", recipe->device);
  }
  std::optional<DeviceBudget::Reservation> reservation =
      devices_.TryReserve(recipe->device, recipe->device_budget_bytes, recipe->slab_bytes);
  if (!reservation) {
    return absl::StrCat("no room for its ", FormatBytes(recipe->slab_bytes), " slab on ",
                        recipe->device, " (ddod's budget ",
                        FormatBytes(recipe->device_budget_bytes), ", held ",
                        FormatBytes(devices_.reserved(recipe->device)), ")");
  }
  absl::StatusOr<std::unique_ptr<ResidentSlab>> opened =
      devices_.OpenSlab(recipe->ordinal, recipe->slab_bytes);
  absl::Status filled = opened.ok() ? FillResidentSlab(**opened, recipe->resident,
                                                       attached->component.tensors,
                                                       attached->bytes)
                                    : opened.status();
  if (!filled.ok()) return absl::StrCat("prefetch failed: ", filled.message());
  WarmSlab warm{recipe->device, std::shared_ptr<ResidentSlab>(*std::move(opened)),
                *std::move(reservation), absl::Now(), key, /*prefetched=*/true,
                lease.caller.uid};
  if (!devices_.PutWarm(slab_key, warm)) {
    return absl::StrCat("its slab is already on ", recipe->device);  // a session left one
  }
  *prefetched_bytes += recipe->slab_bytes;
  return absl::StrCat("prefetched its ", FormatBytes(recipe->slab_bytes), " slab on ",
                      recipe->device);
}

}  // namespace ddo
