// File: daemon/store/component_store_tiering.cc
//
// ComponentStore's moves between the pool and the files (docs/architecture.md §6, "Phases and
// the pool"): a component loaded from files keeps its descriptors (KeepBackingFiles), so that
// when the pool needs room it is demoted to them (DemoteLocked: its segments go, it stays
// READY on the file tier) rather than discarded, and read back later (Promote) into a segment
// of its own, whole (kPool) or in part (kSplit). A promotion reads outside mu_ on a component
// marked `promoting`; its segment replaces the old ones in one step under mu_, and only if the
// component did not change meanwhile (tier_changes), so nobody sees a half-filled segment.
//
// Thread-safety: the ...Locked members run with mu_ held; KeepBackingFiles, DemoteForRoom,
// DemotingOthersHelps, PromotionBytes and Promote take it themselves (Promote drops it while it reads).
#include <algorithm>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "daemon/common/format_bytes.h"
#include "daemon/common/logging.h"
#include "daemon/common/status_macros.h"
#include "daemon/store/component_store.h"
#include "daemon/store/parallel_reader.h"
#include "daemon/store/segment_fill.h"
#include "daemon/store/tier_units.h"
#include "ddo/wire/display_text.h"

namespace ddo {

void ComponentStore::KeepBackingFiles(const Caller& caller, const ComponentSnapshot& ready,
                                      SafetensorsSet& set) {
  absl::MutexLock lock(&mu_);
  auto it = components_.find(KeyOf(caller.uid, ready.cache_key));
  if (it == components_.end() || it->second.info.state != ComponentState::kReady ||
      it->second.files != nullptr || it->second.pooled_files != nullptr ||
      it->second.segments.empty() || it->second.segments.front() == nullptr ||
      it->second.segments.front()->name() != ready.segment_name) {
    return;  // evicted or replaced meanwhile
  }
  if (absl::Status limits = CheckBackingFileLimitsLocked(caller, set.files.size());
      !limits.ok()) {
    Logger("store")->info("'{}' keeps no backing files (it can only be discarded): {}",
                          EscapeForDisplay(ready.cache_key), limits.message());
    return;
  }
  absl::StatusOr<BackingFiles> taken = BackingFiles::TakeFrom(set, &fs_);
  if (!taken.ok()) {
    Logger("store")->warn("'{}' keeps no backing files: {}", EscapeForDisplay(ready.cache_key),
                          taken.status().message());
    return;
  }
  it->second.pooled_files = std::make_shared<const BackingFiles>(*std::move(taken));
}

bool ComponentStore::DemotableLocked(const Component& component) const {
  const bool has_files = component.pooled_files != nullptr ||
                         (component.files != nullptr && !component.segments.empty());
  return has_files && component.info.state == ComponentState::kReady &&
         component.info.sessions == 0 && !component.promoting &&
         component.info.base_cache_key.empty() && ReleasableBytesLocked(component) > 0;
}

uint64_t ComponentStore::DemoteLocked(std::map<std::string, Component>::iterator it) {
  Component& component = it->second;
  const uint64_t released = ReleasableBytesLocked(component);
  std::vector<std::shared_ptr<PoolSegment>> segments = std::move(component.segments);
  component.segments.clear();
  for (const auto& segment : segments) {
    // A segment another component still uses stays (as DiscardLocked leaves it).
    bool used = false;
    for (const auto& [key, other] : components_) {
      used = used || std::find(other.segments.begin(), other.segments.end(), segment) !=
                         other.segments.end();
    }
    if (segment != nullptr && !used) segment->MarkDiscarded();
  }
  if (component.pooled_files != nullptr) component.files = std::move(component.pooled_files);
  component.pooled_files = nullptr;
  component.in_file = nullptr;
  component.proof_digest.clear();
  ComponentSnapshot& info = component.info;
  for (TensorEntry& tensor : info.tensors) tensor.segment = 0;
  LayOut(info.tensors);  // as LoadFileBacked lays out a file-tier table
  info.tier = ComponentTier::kFile;
  info.file_bytes = info.total_bytes;
  ++component.tier_changes;
  Logger("store")->info("demoted '{}' of uid {} to its {} file(s): {} of pool released",
                        EscapeForDisplay(info.cache_key), info.owner_uid,
                        component.files->descriptors(), FormatBytes(released));
  return released;
}

std::vector<ComponentStore::Demoted> ComponentStore::DemoteForRoom(
    const Caller& caller, uint64_t bytes, const std::set<std::string>& spared) {
  std::vector<Demoted> demoted;
  absl::MutexLock lock(&mu_);
  while (!pool_.Fits(bytes)) {
    auto victim = components_.end();
    for (auto it = components_.begin(); it != components_.end(); ++it) {
      const Component& component = it->second;
      if (component.info.owner_uid != caller.uid ||
          spared.count(component.info.cache_key) != 0 || !DemotableLocked(component)) {
        continue;
      }
      if (victim == components_.end() ||
          component.info.last_used < victim->second.info.last_used) {
        victim = it;
      }
    }
    if (victim == components_.end()) break;
    const std::string key = victim->second.info.cache_key;
    demoted.push_back(Demoted{key, DemoteLocked(victim)});
  }
  if (!demoted.empty()) PersistLocked();
  return demoted;
}

namespace {

// Whether tensor `i` of a component is in its files now (no mask: all of them).
bool InFile(const std::vector<bool>* in_file, size_t i) {
  return in_file == nullptr || (*in_file)[i];
}

// The pool bytes `tensors` take in one segment of their own.
uint64_t WholeFootprint(const std::vector<TensorEntry>& tensors) {
  std::vector<TensorEntry> all = tensors;
  for (TensorEntry& tensor : all) tensor.segment = 0;
  return HostPool::Footprint(LayOut(all));
}

// Plans `promotion` (its table set) given `room` bytes of pool: all of it when it fits; else
// the tensors in the pool now plus units of its file tensors spread over `room` less what the
// pool part takes now (that part stays until the new segment replaces it).
void PlanPromotion(Promotion& promotion, const std::vector<bool>* in_file,
                   uint64_t pooled_now, uint64_t room) {
  const std::vector<TensorEntry>& tensors = promotion.tensors;
  promotion.whole = WholeFootprint(tensors) + pooled_now <= room;
  std::set<uint32_t> units;
  if (!promotion.whole && room > pooled_now) {
    std::vector<TensorEntry> file_tensors;
    for (size_t i = 0; i < tensors.size(); ++i) {
      if (InFile(in_file, i)) file_tensors.push_back(tensors[i]);
    }
    units = SpreadUnits(file_tensors, room - pooled_now);
  }
  for (size_t i = 0; i < tensors.size(); ++i) {
    const bool file = InFile(in_file, i);
    if (!promotion.whole && file && units.count(tensors[i].unit) == 0) continue;
    promotion.indices.push_back(i);
    promotion.pooled.push_back(tensors[i]);
    promotion.pooled.back().segment = 0;
    if (file) promotion.moved_bytes += tensors[i].byte_size;
  }
  // Every tensor chosen (the spread took the rest): the same as whole.
  promotion.whole = promotion.indices.size() == tensors.size();
  promotion.span = LayOut(promotion.pooled);
}

// Fills `segment` as `promotion` planned: file tensors read through the backing files, the
// ones in the pool now copied from their segments (through their descriptors).
absl::Status ReadPromotion(const Promotion& promotion,
                           const std::vector<bool>* in_file, PoolSegment& segment, int threads,
                           const std::function<bool()>& cancelled, FileSystem* fs) {
  DDO_ASSIGN_OR_RETURN(SegmentTarget target, SegmentTarget::Of(segment));
  std::vector<UniqueFd> sources;
  for (const auto& old : promotion.old_segments) {
    DDO_ASSIGN_OR_RETURN(UniqueFd source, old->OpenForWriting());
    sources.push_back(std::move(source));
  }
  std::vector<ReadJob> jobs;
  for (size_t j = 0; j < promotion.indices.size(); ++j) {
    const size_t i = promotion.indices[j];
    const TensorEntry& now = promotion.tensors[i];
    if (InFile(in_file, i)) {
      const FileRange& range = promotion.files->ranges()[i];
      const BackingFile& file = promotion.files->FileOf(range);
      jobs.push_back({file.get(), range.offset, nullptr, range.bytes, file.name});
    } else {
      const auto& old = promotion.old_segments.at(now.segment);
      jobs.push_back({sources[now.segment].get(), now.offset, nullptr, now.byte_size,
                      old->name()});
    }
    target.Aim(jobs.back(), promotion.pooled[j].offset);
  }
  return ReadInParallel(jobs, threads, {}, cancelled, kDefaultReadChunkBytes, fs);
}

}  // namespace

uint64_t ComponentStore::PooledFootprint(const Component& component) {
  uint64_t bytes = 0;
  for (const auto& segment : component.segments) bytes += segment->size();
  return bytes;
}

absl::StatusOr<std::optional<Promotion>> ComponentStore::BeginPromotionLocked(
    const std::string& cache_key, const Caller& caller, bool whole_only) {
  auto it = components_.find(KeyOf(caller.uid, cache_key));
  if (it == components_.end() || it->second.info.state != ComponentState::kReady) {
    return absl::NotFoundError(
        absl::StrCat("no component '", EscapeForDisplay(cache_key), "' in the pool"));
  }
  Component& component = it->second;
  if (component.files == nullptr) return std::optional<Promotion>();  // in the pool
  if (component.promoting) {
    return absl::AbortedError(
        absl::StrCat("'", EscapeForDisplay(cache_key), "' is being read into the pool already"));
  }
  const PoolUsage usage = pool_.Usage();
  const uint64_t free = usage.free_bytes();
  const uint64_t margin = SessionMargin(component.info.tensors, usage.budget_bytes);
  // A split component whose whole fits only once its pool part goes: that part goes first
  // (unused, so nobody reads it), and all of it is read from the files.
  if (!component.segments.empty() && DemotableLocked(component) &&
      WholeFootprint(component.info.tensors) + margin <= free + ReleasableBytesLocked(component) &&
      WholeFootprint(component.info.tensors) + PooledFootprint(component) + margin > free) {
    DemoteLocked(it);
    return BeginPromotionLocked(cache_key, caller, whole_only);
  }
  Promotion promotion;
  promotion.key = it->first;
  promotion.files = component.files;
  promotion.old_segments = component.segments;
  promotion.in_file = component.in_file;
  promotion.tensors = component.info.tensors;
  promotion.tier_changes = component.tier_changes;
  if (free < margin) return std::optional<Promotion>();
  PlanPromotion(promotion, component.in_file.get(), PooledFootprint(component), free - margin);
  if (whole_only && !promotion.whole) return std::optional<Promotion>();
  if (promotion.moved_bytes < LeastWorthPromoting(usage.budget_bytes) &&
      !(promotion.whole && promotion.moved_bytes > 0)) {
    return std::optional<Promotion>();
  }
  DDO_RETURN_IF_ERROR(CheckUploadLimitsLocked(caller, promotion.span, {}, {}, /*upload=*/false));
  component.promoting = true;
  return std::optional<Promotion>(std::move(promotion));
}

absl::Status ComponentStore::FinishPromotionLocked(const Promotion& promotion,
                                                   std::shared_ptr<PoolSegment> segment) {
  auto it = components_.find(promotion.key);
  if (it == components_.end() || it->second.files != promotion.files ||
      it->second.tier_changes != promotion.tier_changes) {
    segment->MarkDiscarded();
    return absl::AbortedError("the component changed while it was read into the pool");
  }
  Component& component = it->second;
  ComponentSnapshot& info = component.info;
  auto in_file = std::make_shared<std::vector<bool>>(info.tensors.size(), true);
  uint64_t pooled_bytes = 0;
  for (size_t j = 0; j < promotion.indices.size(); ++j) {
    TensorEntry& tensor = info.tensors[promotion.indices[j]];
    tensor.segment = 0;
    tensor.offset = promotion.pooled[j].offset;
    (*in_file)[promotion.indices[j]] = false;
    pooled_bytes += tensor.byte_size;
  }
  for (const auto& old : component.segments) old->MarkDiscarded();  // its own (not derived)
  component.segments = {std::move(segment)};
  if (promotion.whole) {
    component.pooled_files = std::move(component.files);
    component.files = nullptr;
    component.in_file = nullptr;
    info.tier = ComponentTier::kPool;
    info.file_bytes = 0;
  } else {
    component.in_file = std::move(in_file);
    info.tier = ComponentTier::kSplit;
    info.file_bytes = info.total_bytes - pooled_bytes;
  }
  component.reread = true;
  component.proof_digest.clear();
  component.promoting = false;
  ++component.tier_changes;
  PersistLocked();  // whole: back in the manifest
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> ComponentStore::Promote(const std::string& cache_key,
                                                 const Caller& caller,
                                                 const std::function<bool()>& cancelled,
                                                 bool whole_only) {
  std::optional<Promotion> promotion;
  {
    absl::MutexLock lock(&mu_);
    if (closed_) return absl::UnavailableError("ddod is shutting down");
    DDO_ASSIGN_OR_RETURN(promotion, BeginPromotionLocked(cache_key, caller, whole_only));
  }
  if (!promotion.has_value()) return 0;
  absl::Cleanup done = [&] {
    absl::MutexLock lock(&mu_);
    auto it = components_.find(promotion->key);
    if (it != components_.end() && it->second.tier_changes == promotion->tier_changes) {
      it->second.promoting = false;
    }
  };
  const absl::Time started = absl::Now();
  DDO_ASSIGN_OR_RETURN(std::shared_ptr<PoolSegment> segment,
                       AllocateToFill(promotion->span, OwnExtents(promotion->pooled), nullptr));
  absl::Status read = ReadPromotion(*promotion, promotion->in_file.get(), *segment, options_.read_threads,
                                    cancelled, &fs_);
  if (!read.ok()) {
    segment->MarkDiscarded();
    return read;
  }
  if (absl::Status pinned = segment->Pin(); !pinned.ok()) {
    Logger("store")->warn("serving {} unpinned: {}", segment->name(), pinned.message());
  }
  absl::MutexLock lock(&mu_);
  DDO_RETURN_IF_ERROR(FinishPromotionLocked(*promotion, segment));
  Logger("store")->info("'{}' read back into the pool: {} in {:.2f} s ({})",
                        EscapeForDisplay(cache_key), FormatBytes(promotion->moved_bytes),
                        absl::ToDoubleSeconds(absl::Now() - started),
                        promotion->whole ? "all of it" : "split, the rest in its files");
  return promotion->moved_bytes;
}

bool ComponentStore::DemotingOthersHelps(const std::string& cache_key, const Caller& caller,
                                         const std::set<std::string>& spared) const {
  absl::MutexLock lock(&mu_);
  auto it = components_.find(KeyOf(caller.uid, cache_key));
  if (it == components_.end() || it->second.info.state != ComponentState::kReady ||
      it->second.files == nullptr) {
    return false;  // nothing of it to read back
  }
  const Component& component = it->second;
  uint64_t demotable = 0;
  for (const auto& [key, other] : components_) {
    if (&other != &component && other.info.owner_uid == caller.uid &&
        spared.count(other.info.cache_key) == 0 && DemotableLocked(other)) {
      demotable += ReleasableBytesLocked(other);
    }
  }
  if (demotable == 0) return false;
  // The room BeginPromotionLocked would see once the others went.
  const PoolUsage usage = pool_.Usage();
  const uint64_t room = usage.free_bytes() + demotable;
  const uint64_t margin = SessionMargin(component.info.tensors, usage.budget_bytes);
  const uint64_t own = DemotableLocked(component) ? ReleasableBytesLocked(component) : 0;
  if (WholeFootprint(component.info.tensors) + margin <= room + own) return true;
  const uint64_t pooled = PooledFootprint(component);
  return room > margin + pooled &&
         room - margin - pooled >= LeastWorthPromoting(usage.budget_bytes);
}

ComponentStore::PromotionNeed ComponentStore::PromotionBytes(const std::string& cache_key,
                                                            const Caller& caller) const {
  absl::MutexLock lock(&mu_);
  auto it = components_.find(KeyOf(caller.uid, cache_key));
  if (it == components_.end() || it->second.info.state != ComponentState::kReady ||
      it->second.files == nullptr) {
    return {};
  }
  const std::vector<TensorEntry>& tensors = it->second.info.tensors;
  return {WholeFootprint(tensors), SessionMargin(tensors, pool_.options().budget_bytes)};
}

}  // namespace ddo
