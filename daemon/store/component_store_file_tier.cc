// File: daemon/store/component_store_file_tier.cc
//
// ComponentStore's file tier (docs/architecture.md §6): a safetensors load that the pool
// cannot make room for becomes a READY component whose bytes stay in its files. Nothing is
// read into the pool: the set's descriptors are moved into the component's BackingFiles (no
// path is reopened), a given content hash is checked by streaming the files through one
// bounded buffer, and the entry has no segment. It is never in the manifest (descriptors do
// not outlive ddod) nor another uid's sharing-proof target; evicting it closes the
// descriptors (once no reader holds a copy).
//
// Thread-safety: LoadFileBacked runs outside mu_ (the hash reads the files) and takes it to
// insert; InsertFileBackedLocked is called with mu_ held.
#include <algorithm>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/common/format_bytes.h"
#include "daemon/common/logging.h"
#include "daemon/common/status_macros.h"
#include "daemon/store/component_store.h"
#include "daemon/store/direct_reader.h"
#include "daemon/store/parallel_reader.h"
#include "daemon/store/segment_fill.h"
#include "daemon/store/tier_units.h"
#include "ddo/wire/display_text.h"

namespace ddo {
namespace {

// The buffer a content hash of files is streamed through.
constexpr uint64_t kHashBufferBytes = uint64_t{16} << 20;

}  // namespace

absl::StatusOr<LoadResult> ComponentStore::LoadFileBacked(
    const Lease& lease, const SafetensorsRequest& request, SafetensorsSet& set,
    std::vector<TensorEntry> tensors, const std::vector<FileIdentity>& sources,
    const std::function<bool()>& cancelled) {
  DDO_ASSIGN_OR_RETURN(BackingFiles taken, BackingFiles::TakeFrom(set, &fs_));
  auto files = std::make_shared<const BackingFiles>(std::move(taken));
  if (!request.content_hash.empty()) {
    DDO_ASSIGN_OR_RETURN(std::string actual,
                         ContentHashOfFiles(*files, kHashBufferBytes, cancelled, &fs_));
    if (actual != request.content_hash) {
      return absl::InvalidArgumentError(absl::StrCat(
          "content hash mismatch: the client announced ", request.content_hash,
          " but the files hash to ", actual, "; nothing was loaded"));
    }
  }
  for (TensorEntry& tensor : tensors) tensor.segment = 0;
  LayOut(tensors);  // the offsets a pool copy would have; nothing is in the pool
  Component component;
  ComponentSnapshot& info = component.info;
  info.cache_key = request.cache_key;
  info.structure_hash = StructureHash(tensors);
  info.content_hash = request.content_hash;
  info.total_bytes = TotalTensorBytes(tensors);
  info.own_bytes = info.total_bytes;
  info.unit_count = CountUnits(tensors);
  info.tensors = std::move(tensors);
  info.tier = ComponentTier::kFile;
  info.file_bytes = info.total_bytes;
  component.sources = sources;
  component.files = std::move(files);
  absl::MutexLock lock(&mu_);
  if (closed_) return absl::UnavailableError("ddod is shutting down");
  return InsertFileBackedLocked(lease, std::move(component));
}

absl::Status ComponentStore::CheckBackingFileLimitsLocked(const Caller& caller,
                                                          size_t more) const {
  size_t own = 0;
  size_t all = 0;
  for (const auto& [key, component] : components_) {
    // A file-tier component's, and those a pooled one keeps to be demoted to.
    for (const auto* files : {component.files.get(), component.pooled_files.get()}) {
      if (files == nullptr) continue;
      all += files->descriptors();
      if (component.info.owner_uid == caller.uid) own += files->descriptors();
    }
  }
  if (!caller.admin && own + more > options_.max_backing_files_per_uid) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "uid ", caller.uid, " keeps ", own, " backing file(s) open for components on the file ",
        "tier; ", more, " more would pass the limit per user (",
        options_.max_backing_files_per_uid, "); evict components you no longer need"));
  }
  if (all + more > options_.max_backing_files) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "ddod keeps ", all, " backing files open for components on the file tier; ", more,
        " more would pass its limit (", options_.max_backing_files,
        "); evict components you no longer need"));
  }
  return absl::OkStatus();
}

absl::StatusOr<LoadResult> ComponentStore::InsertFileBackedLocked(const Lease& lease,
                                                                  Component component) {
  const Caller& caller = lease.caller;
  ComponentSnapshot& info = component.info;
  // The key may have changed since BeginUpload looked: the same rules again.
  auto same = [&](const Component& existing) {
    return existing.info.base_cache_key.empty() &&
           existing.info.structure_hash == info.structure_hash &&
           (info.content_hash.empty() || existing.info.content_hash == info.content_hash);
  };
  DDO_ASSIGN_OR_RETURN(std::optional<ComponentSnapshot> warm,
                       ClearKeyLocked(caller, info.cache_key, same));
  if (warm.has_value()) return LoadResult{*std::move(warm), /*warm_hit=*/true, 0};
  DDO_RETURN_IF_ERROR(
      CheckUploadLimitsLocked(caller, 0, {}, info.tensors, /*upload=*/false));
  DDO_RETURN_IF_ERROR(CheckBackingFileLimitsLocked(caller, component.files->descriptors()));
  info.component_id = ComponentId(info.cache_key, info.structure_hash);
  info.state = ComponentState::kReady;
  info.last_used = Now();
  info.uploader_pid = lease.client_pid;
  info.owner_uid = caller.uid;
  Logger("store")->info("'{}' ready on the file tier: {} in {} file(s), nothing in the pool",
                        EscapeForDisplay(info.cache_key), FormatBytes(info.total_bytes),
                        component.files->descriptors());
  const std::string key = KeyOf(caller.uid, info.cache_key);
  auto it = components_.insert_or_assign(key, std::move(component)).first;
  PersistLocked();  // ClearKeyLocked may have removed a pool entry under the key
  return LoadResult{SnapshotLocked(it->second), /*warm_hit=*/false, 0};
}

namespace {

// Reads the tensors `indices` of the table (`files`' ranges) into `segment`, at the offsets
// `pooled` (their entries, laid out in the segment) gives them.
absl::Status ReadIntoSegment(const BackingFiles& files, const std::vector<size_t>& indices,
                             const std::vector<TensorEntry>& pooled, PoolSegment& segment,
                             int threads, const std::function<bool()>& cancelled,
                             FileSystem* fs) {
  DDO_ASSIGN_OR_RETURN(SegmentTarget target, SegmentTarget::Of(segment));
  std::vector<ReadJob> jobs;
  for (size_t j = 0; j < pooled.size(); ++j) {
    const FileRange& range = files.ranges()[indices[j]];
    const BackingFile& file = files.FileOf(range);
    ReadJob job{file.get(), range.offset, nullptr, range.bytes, file.name};
    target.Aim(job, pooled[j].offset);
    jobs.push_back(std::move(job));
  }
  return ReadInParallel(jobs, threads, {}, cancelled, kDefaultReadChunkBytes, fs);
}

}  // namespace

ComponentSnapshot ComponentStore::PromoteToFit(const Caller& caller,
                                               const ComponentSnapshot& loaded,
                                               const std::function<bool()>& cancelled) {
  const PoolUsage usage = pool_.Usage();
  const uint64_t free = usage.free_bytes();
  const uint64_t margin = SessionMargin(loaded.tensors, usage.budget_bytes);
  const uint64_t least_worth_it = LeastWorthPromoting(usage.budget_bytes);
  if (loaded.files == nullptr || free < margin + least_worth_it) return loaded;
  const std::set<uint32_t> units = SpreadUnits(loaded.tensors, free - margin);
  // The chosen tensors, laid out in a segment of their own.
  std::vector<TensorEntry> pooled;
  std::vector<size_t> indices;
  for (size_t i = 0; i < loaded.tensors.size(); ++i) {
    if (units.count(loaded.tensors[i].unit) == 0) continue;
    pooled.push_back(loaded.tensors[i]);
    indices.push_back(i);
  }
  if (pooled.empty()) return loaded;
  const uint64_t span = LayOutToFill(pooled);
  {
    absl::MutexLock lock(&mu_);
    // The pool bytes count in the owner's limit (--max-user-pool-gb) like any other.
    if (absl::Status limits = CheckUploadLimitsLocked(caller, span, {}, {}, /*upload=*/false);
        !limits.ok()) {
      Logger("store")->info("'{}' stays in its files: {}", EscapeForDisplay(loaded.cache_key),
                            limits.message());
      return loaded;
    }
  }
  absl::StatusOr<std::shared_ptr<PoolSegment>> segment = AllocateToFill(span, OwnExtents(pooled), nullptr);
  if (!segment.ok()) {
    Logger("store")->info("'{}' stays in its files: {}", EscapeForDisplay(loaded.cache_key),
                          segment.status().message());
    return loaded;
  }
  const absl::Time started = absl::Now();
  absl::Status read = ReadIntoSegment(*loaded.files, indices, pooled, **segment,
                                      options_.read_threads, cancelled, &fs_);
  if (read.ok()) read = (*segment)->Pin();
  if (!read.ok()) {
    Logger("store")->warn("'{}' stays in its files: reading part of it into the pool: {}",
                          EscapeForDisplay(loaded.cache_key), read.ToString());
    (*segment)->MarkDiscarded();
    return loaded;
  }
  absl::MutexLock lock(&mu_);
  auto it = components_.find(KeyOf(caller.uid, loaded.cache_key));
  // Replaced or evicted meanwhile: the segment goes with this function.
  if (it == components_.end() || it->second.files != loaded.files ||
      !it->second.segments.empty()) {
    (*segment)->MarkDiscarded();
    return loaded;
  }
  Component& component = it->second;
  auto in_file = std::make_shared<std::vector<bool>>(component.info.tensors.size(), true);
  uint64_t pooled_bytes = 0;
  for (size_t j = 0; j < pooled.size(); ++j) {
    TensorEntry& tensor = component.info.tensors[indices[j]];
    tensor.segment = 0;
    tensor.offset = pooled[j].offset;
    (*in_file)[indices[j]] = false;
    pooled_bytes += tensor.byte_size;
  }
  component.segments = {*segment};
  component.in_file = std::move(in_file);
  component.info.tier = ComponentTier::kSplit;
  component.info.file_bytes = component.info.total_bytes - pooled_bytes;
  ++component.tier_changes;  // a Promote planned before this commits nothing
  Logger("store")->info(
      "'{}' split: {} of its {} in the pool ({} of {} units, read in {:.2f} s), {} read from "
      "its files as it streams",
      EscapeForDisplay(loaded.cache_key), FormatBytes(pooled_bytes),
      FormatBytes(component.info.total_bytes), units.size(), component.info.unit_count,
      absl::ToDoubleSeconds(absl::Now() - started), FormatBytes(component.info.file_bytes));
  return SnapshotLocked(component);
}

}  // namespace ddo
