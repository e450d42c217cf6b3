// File: daemon/store/component_store_adoption.cc
//
// ComponentStore's adoption after a restart or a crash (AdoptPrevious): each component the
// previous ddod's manifest lists is checked (segments of this pool, table against its
// structure hash, tensors inside their segments) and adopted with its segments, each segment
// once; whatever else carries the pool's prefix is removed. Runs under the store's mu_.
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "daemon/common/format_bytes.h"
#include "daemon/common/logging.h"
#include "daemon/common/status_macros.h"
#include "daemon/store/component_store.h"
#include "daemon/store/manifest.h"
#include "ddo/wire/display_text.h"

namespace ddo {
namespace {

// A keep-alive as the manifest keeps it: 0 for ddod's default, -1 for never.
absl::Duration KeepAliveFromSeconds(int64_t seconds) {
  if (seconds < 0) return absl::InfiniteDuration();
  return absl::Seconds(seconds);
}

// Why `entry` cannot be adopted, judged on the entry itself (FAILED_PRECONDITION: the
// reason); `key_taken`: an entry under its key was adopted already.
absl::Status CheckManifestEntry(const ManifestComponent& entry, const std::string& pool_prefix,
                                bool key_taken) {
  const bool derived = !entry.base_cache_key.empty();
  if (entry.segments.empty() || (!derived && entry.segments.size() != 1)) {
    return absl::FailedPreconditionError(
        "the manifest gives it no segment, or several without a base");
  }
  for (const ManifestSegment& segment : entry.segments) {
    if (segment.name.rfind(pool_prefix, 0) != 0) {
      return absl::FailedPreconditionError("the segment is not this pool's");
    }
  }
  if (key_taken) return absl::FailedPreconditionError("the manifest lists the key twice");
  if (StructureHash(entry.tensors) != entry.structure_hash ||
      ComponentId(entry.cache_key, entry.structure_hash) != entry.component_id) {
    return absl::FailedPreconditionError("its tensor table does not match its structure hash");
  }
  for (const TensorEntry& tensor : entry.tensors) {
    auto bytes = TensorByteSize(tensor.dtype, tensor.shape);
    if (!bytes.ok() || *bytes != tensor.byte_size || tensor.segment >= entry.segments.size() ||
        tensor.offset + tensor.byte_size > entry.segments[tensor.segment].size) {
      return absl::FailedPreconditionError("a tensor lies outside its segment");
    }
  }
  return absl::OkStatus();
}

// The segments `entry` lists, adopted from the pool (and pinned) unless `adopted` has them
// already: FAILED_PRECONDITION saying which is gone or has another size.
absl::StatusOr<std::vector<std::shared_ptr<PoolSegment>>> AdoptSegments(
    HostPool& pool, const ManifestComponent& entry,
    std::map<std::string, std::shared_ptr<PoolSegment>>& adopted) {
  std::vector<std::shared_ptr<PoolSegment>> segments;
  for (size_t i = 0; i < entry.segments.size(); ++i) {
    const ManifestSegment& wanted = entry.segments[i];
    std::shared_ptr<PoolSegment>& segment = adopted[wanted.name];
    if (segment == nullptr) {
      auto opened = pool.Adopt(wanted.name);
      if (!opened.ok()) {
        return absl::FailedPreconditionError(
            i == 0 ? std::string(opened.status().message())
                   : absl::StrCat("a segment it shares with its base is gone (",
                                  opened.status().message(), ")"));
      }
      segment = *std::move(opened);
      if (absl::Status pinned = segment->Pin(); !pinned.ok()) {
        Logger("store")->warn("serving {} unpinned: {}", wanted.name, pinned.message());
      }
    }
    if (segment->size() != wanted.size) {
      return absl::FailedPreconditionError(
          absl::StrCat("the segment ", wanted.name, " has ", segment->size(),
                       " bytes, the manifest says ", wanted.size, " (truncated?)"));
    }
    segments.push_back(segment);
  }
  return segments;
}

// The READY component's info `entry` describes, last used `now`; takes its table and base keys.
ComponentSnapshot InfoOfManifestEntry(ManifestComponent& entry, absl::Time now) {
  const bool derived = !entry.base_cache_key.empty();
  ComponentSnapshot info;
  info.component_id = entry.component_id;
  info.cache_key = entry.cache_key;
  info.structure_hash = entry.structure_hash;
  info.content_hash = entry.content_hash;
  info.state = ComponentState::kReady;
  info.total_bytes = TotalTensorBytes(entry.tensors);
  info.unit_count = CountUnits(entry.tensors);
  info.last_used = now;
  for (const TensorEntry& tensor : entry.tensors) {
    if (tensor.segment != 0) continue;
    info.own_bytes += tensor.byte_size;
    info.changed_tensors += derived ? 1 : 0;
  }
  info.base_cache_key = std::move(entry.base_cache_key);
  info.base_component_id = std::move(entry.base_component_id);
  info.tensors = std::move(entry.tensors);
  info.owner_uid = entry.owner_uid;
  info.keep_alive = KeepAliveFromSeconds(entry.keep_alive_seconds);
  return info;
}

// Removes this pool's segments that are not in `kept`: unfinished uploads and rejected
// components.
void RemoveLeftoverSegments(HostPool& pool, FileSystem& fs, const std::set<std::string>& kept) {
  auto log = Logger("store");
  for (const std::string& name : pool.ListSegmentNames()) {
    if (kept.count(name) == 0) {
      log->info("removing leftover segment {}", name);
      if (absl::Status removed = fs.ShmUnlink(name); !removed.ok()) {
        log->warn("{}", removed.message());
      }
    }
  }
}

}  // namespace

void ComponentStore::AdoptPrevious() {
  auto log = Logger("store");
  std::set<std::string> kept;
  auto manifest = ReadManifest(options_.manifest_path);
  if (!manifest.ok() && !absl::IsNotFound(manifest.status())) {
    log->error("discarding the previous pool: {}", manifest.status().message());
  }
  // Each segment is adopted (counted, pinned) once, however many components use it: a base
  // and the derived versions that share its bytes.
  std::map<std::string, std::shared_ptr<PoolSegment>> adopted_segments;
  absl::MutexLock lock(&mu_);
  for (ManifestComponent& entry : manifest.ok() ? *manifest : std::vector<ManifestComponent>{}) {
    const std::string own_name = entry.segments.empty() ? "" : entry.segments.front().name;
    if (absl::Status adopted = AdoptEntryLocked(entry, adopted_segments); !adopted.ok()) {
      log->warn("not adopting '{}' ({}): {}", EscapeForDisplay(entry.cache_key), own_name,
                adopted.message());
      continue;
    }
    for (const ManifestSegment& segment : entry.segments) kept.insert(segment.name);
  }
  // Segments adopted only for components that were then refused go back to the budget here
  // (and leave /dev/shm just below).
  adopted_segments.clear();
  // Whatever else carries this pool's prefix is an unfinished upload or a rejected component.
  RemoveLeftoverSegments(pool_, fs_, kept);
  PersistLocked();
}

absl::Status ComponentStore::AdoptEntryLocked(
    ManifestComponent& entry, std::map<std::string, std::shared_ptr<PoolSegment>>& adopted) {
  const std::string key = KeyOf(entry.owner_uid, entry.cache_key);
  DDO_RETURN_IF_ERROR(
      CheckManifestEntry(entry, pool_.name_prefix(), components_.count(key) != 0));
  DDO_ASSIGN_OR_RETURN(std::vector<std::shared_ptr<PoolSegment>> segments,
                       AdoptSegments(pool_, entry, adopted));
  const bool derived = !entry.base_cache_key.empty();
  Component component;
  component.info = InfoOfManifestEntry(entry, Now());
  component.client_written = entry.client_written;
  if (!derived) component.sources = std::move(entry.sources);
  if (!entry.readers.empty()) {
    // A manifest of a ddod before keys were per uid: the component stays its owner's; its
    // readers share it again by proof on their next load.
    Logger("store")->info(
        "'{}' of uid {}: dropping the {} other user(s) it was shared with; they share it "
        "again by proof on their next load",
        EscapeForDisplay(entry.cache_key), entry.owner_uid, entry.readers.size());
  }
  component.segments = std::move(segments);
  Logger("store")->info("adopted '{}' ({}{}) from the previous ddod",
                        EscapeForDisplay(entry.cache_key), FormatBytes(component.info.own_bytes),
                        derived ? absl::StrCat(" own, derived from '",
                                               EscapeForDisplay(component.info.base_cache_key),
                                               "'")
                                : "");
  components_[key] = std::move(component);
  ++adopted_;
  return absl::OkStatus();
}

}  // namespace ddo
