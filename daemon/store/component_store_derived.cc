// File: daemon/store/component_store_derived.cc
//
// ComponentStore's derived versions (RegisterDerived): a base's table whose changed tensors
// are laid out in a segment of their own, every other tensor shared with the base's
// segments. The plan is made and the placeholder inserted under the store's mu_; the new
// segment is allocated outside it (AllocateUpload).
#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/common/random_id.h"
#include "daemon/common/status_macros.h"
#include "daemon/store/component_store.h"
#include "ddo/wire/display_text.h"

namespace ddo {
namespace {

// What a derived version of a base is: its root (the base, or the base's own root when the
// base is itself derived), its table and segments, and the tensors it stores anew.
struct DerivedPlan {
  std::string root_key;
  std::string root_id;
  // The base's table: the changed tensors laid out anew in segment 0 (the version's own),
  // every other tensor where the base has it, in the segments shared with it.
  std::vector<TensorEntry> tensors;
  std::vector<std::shared_ptr<PoolSegment>> segments;  // segment 0 (own) still null
  std::vector<TensorEntry> fresh;                      // the changed tensors, laid out
  uint64_t span = 0;                                   // of the own segment
};

// The request's arguments, before anything is looked up.
absl::Status CheckDerivedRequest(const DerivedRequest& request) {
  const std::string key = EscapeForDisplay(request.cache_key);
  if (request.cache_key.empty()) {
    return absl::InvalidArgumentError("cache_key is empty");
  }
  if (request.cache_key == request.base_cache_key) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", key, "' cannot be derived from itself: give the derived version a key "
                     "of its own"));
  }
  if (request.content_hash.empty()) {
    return absl::InvalidArgumentError(
        "a derived version needs content_hash: the xxh3-64 of its changed tensors' bytes in "
        "table order");
  }
  DDO_RETURN_IF_ERROR(CheckContentHashForm(request.content_hash));
  if (request.changed_tensors.empty()) {
    return absl::InvalidArgumentError(
        "changed_tensors is empty: a derived version stores at least one tensor anew (with "
        "none changed, use the base itself)");
  }
  return absl::OkStatus();
}

// Which of the base's tensors are stored anew: INVALID_ARGUMENT for a name that is not the
// base's or is named twice.
absl::StatusOr<std::vector<bool>> ChangedTensors(const std::vector<TensorEntry>& base_tensors,
                                                 const std::vector<std::string>& names,
                                                 const std::string& base_key) {
  std::map<std::string, size_t> index_of;
  for (size_t i = 0; i < base_tensors.size(); ++i) index_of.emplace(base_tensors[i].name, i);
  std::vector<bool> changed(base_tensors.size(), false);
  for (size_t i = 0; i < names.size(); ++i) {
    const std::string& name = names[i];
    auto found = index_of.find(name);
    if (found == index_of.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("changed_tensors[", i, "]: '", EscapeForDisplay(name, 64),
                       "' is not a tensor of '", base_key, "'"));
    }
    if (changed[found->second]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "changed_tensors[", i, "]: '", EscapeForDisplay(name, 64), "' is named twice"));
    }
    changed[found->second] = true;
  }
  return changed;
}

// Lays `plan`'s table out over the base's (its table and segments): the changed tensors in
// the own segment, the others shared where the base has them.
void LayOutDerived(const std::vector<TensorEntry>& base_tensors,
                   const std::vector<std::shared_ptr<PoolSegment>>& base_segments,
                   const std::vector<bool>& changed, DerivedPlan& plan) {
  plan.tensors = base_tensors;
  plan.segments = {nullptr};
  std::vector<uint32_t> shared_index(base_segments.size(), UINT32_MAX);
  for (size_t i = 0; i < plan.tensors.size(); ++i) {
    if (changed[i]) {
      plan.fresh.push_back(plan.tensors[i]);
      continue;
    }
    uint32_t& index = shared_index[plan.tensors[i].segment];
    if (index == UINT32_MAX) {
      index = static_cast<uint32_t>(plan.segments.size());
      plan.segments.push_back(base_segments[plan.tensors[i].segment]);
    }
    plan.tensors[i].segment = index;
  }
  plan.span = std::max<uint64_t>(LayOut(plan.fresh), 1);
  for (size_t i = 0, next = 0; i < plan.tensors.size(); ++i) {
    if (!changed[i]) continue;
    plan.tensors[i].offset = plan.fresh[next++].offset;
    plan.tensors[i].segment = 0;
  }
}

// The plan of the version `request` asks for of the base (`base`, the caller's READY
// component under request.base_cache_key, and its segments).
absl::StatusOr<DerivedPlan> PlanDerived(const ComponentSnapshot& base,
                                        const std::vector<std::shared_ptr<PoolSegment>>& segments,
                                        const DerivedRequest& request) {
  const std::string base_key = EscapeForDisplay(request.base_cache_key);
  DerivedPlan plan;
  const bool base_derived = !base.base_cache_key.empty();
  plan.root_key = base_derived ? base.base_cache_key : request.base_cache_key;
  plan.root_id = base_derived ? base.base_component_id : base.component_id;
  if (plan.root_key == request.cache_key) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", base_key, "' is derived from '", EscapeForDisplay(request.cache_key),
        "': a component cannot be derived from a version of itself; use another key"));
  }
  DDO_ASSIGN_OR_RETURN(std::vector<bool> changed,
                       ChangedTensors(base.tensors, request.changed_tensors, base_key));
  LayOutDerived(base.tensors, segments, changed, plan);
  return plan;
}

// Whether `existing` (info and segments) is the version `plan` describes: same root, the
// same tensors stored anew with the same bytes (`content_hash`), and the others the very
// bytes the base shares (same segment, same place).
bool SameDerivedVersion(const ComponentSnapshot& existing,
                        const std::vector<std::shared_ptr<PoolSegment>>& existing_segments,
                        const std::string& structure_hash, const std::string& content_hash,
                        const DerivedPlan& plan) {
  if (existing.base_cache_key != plan.root_key || existing.base_component_id != plan.root_id ||
      existing.structure_hash != structure_hash || existing.content_hash != content_hash ||
      existing.tensors.size() != plan.tensors.size()) {
    return false;
  }
  for (size_t i = 0; i < plan.tensors.size(); ++i) {
    const TensorEntry& theirs = existing.tensors[i];
    const TensorEntry& wanted = plan.tensors[i];
    if ((theirs.segment == 0) != (wanted.segment == 0)) return false;
    if (wanted.segment != 0 &&
        (theirs.offset != wanted.offset ||
         existing_segments[theirs.segment] != plan.segments[wanted.segment])) {
      return false;
    }
  }
  return true;
}

}  // namespace

absl::StatusOr<RegisterResult> ComponentStore::RegisterDerived(const Lease& lease,
                                                               const DerivedRequest& request,
                                                               WorkProgress* progress) {
  DDO_RETURN_IF_ERROR(CheckDerivedRequest(request));
  const std::string upload_id = RandomId();
  uint64_t span = 0;
  {
    absl::MutexLock lock(&mu_);
    if (closed_) return absl::UnavailableError("ddod is shutting down");
    DDO_ASSIGN_OR_RETURN(std::optional<ComponentSnapshot> warm,
                         BeginDerivedLocked(lease, request, upload_id, &span));
    if (warm.has_value()) return RegisterResult{*std::move(warm), /*warm_hit=*/true, "", {}};
  }
  return AllocateUpload(upload_id, request.cache_key, span, lease.caller, progress);
}

absl::StatusOr<std::optional<ComponentSnapshot>> ComponentStore::BeginDerivedLocked(
    const Lease& lease, const DerivedRequest& request, const std::string& upload_id,
    uint64_t* span) {
  const Caller& caller = lease.caller;
  auto base = components_.find(KeyOf(caller.uid, request.base_cache_key));
  if (base == components_.end() || base->second.info.state != ComponentState::kReady) {
    return absl::NotFoundError(absl::StrCat("no component '",
                                            EscapeForDisplay(request.base_cache_key),
                                            "' in the pool to derive '",
                                            EscapeForDisplay(request.cache_key), "' from"));
  }
  const Component& parent = base->second;
  if (parent.files != nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "'", EscapeForDisplay(request.base_cache_key),
        "' is served from its files, not the pool: a derived version needs its base in the pool"));
  }
  DDO_ASSIGN_OR_RETURN(DerivedPlan plan, PlanDerived(parent.info, parent.segments, request));
  auto same = [&](const Component& existing) {
    return SameDerivedVersion(existing.info, existing.segments, parent.info.structure_hash,
                              request.content_hash, plan);
  };
  DDO_ASSIGN_OR_RETURN(std::optional<ComponentSnapshot> warm,
                       ClearKeyLocked(caller, request.cache_key, same));
  if (warm.has_value()) return warm;
  DDO_RETURN_IF_ERROR(CheckUploadLimitsLocked(caller, plan.span, plan.segments, plan.tensors));
  // The base stays: evicting it would release nothing while this version shares its bytes.
  DDO_RETURN_IF_ERROR(MakeRoomLocked(KeyOf(caller.uid, request.cache_key), plan.span,
                                     {KeyOf(caller.uid, request.base_cache_key)}));
  // ClearKeyLocked and MakeRoomLocked left the base (another key, spared) where it was.
  Component placeholder;
  placeholder.info.cache_key = request.cache_key;
  placeholder.info.structure_hash = parent.info.structure_hash;
  placeholder.info.content_hash = request.content_hash;
  placeholder.info.total_bytes = parent.info.total_bytes;
  placeholder.info.unit_count = parent.info.unit_count;
  placeholder.info.base_cache_key = plan.root_key;
  placeholder.info.base_component_id = plan.root_id;
  placeholder.info.changed_tensors = static_cast<uint32_t>(plan.fresh.size());
  placeholder.info.own_bytes = TotalTensorBytes(plan.fresh);
  placeholder.info.tensors = std::move(plan.tensors);
  placeholder.segments = std::move(plan.segments);
  *span = plan.span;
  AddPlaceholderLocked(lease, upload_id, plan.span, /*client_written=*/true,
                       std::move(placeholder));
  return std::optional<ComponentSnapshot>();
}

}  // namespace ddo
