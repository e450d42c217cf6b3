#include "daemon/store/component_store.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "daemon/common/display_text.h"
#include "daemon/common/format_bytes.h"
#include "daemon/common/logging.h"
#include "daemon/common/posix_error.h"
#include "daemon/common/status_macros.h"
#include "daemon/common/unique_fd.h"
#include "daemon/store/manifest.h"
#include "daemon/store/parallel_reader.h"
#include "daemon/store/safetensors.h"
#include "daemon/store/safetensors_hash.h"

namespace ddo {
namespace {

// The table of a safetensors set: file order, then offset order; module path from the name.
absl::StatusOr<std::vector<TensorEntry>> TableOfSafetensors(
    const SafetensorsSet& set, const std::map<std::string, uint32_t>& units) {
  std::vector<TensorEntry> tensors;
  for (const SafetensorsFile& file : set.files) {
    for (const SafetensorsTensor& source : file.tensors) {
      TensorEntry tensor;
      tensor.name = source.name;
      tensor.dtype = source.dtype;
      tensor.shape = source.shape;
      tensor.byte_size = source.byte_size;
      const size_t dot = source.name.rfind('.');
      tensor.module_path = dot == std::string::npos ? "" : source.name.substr(0, dot);
      if (units.empty()) {
        tensor.unit = static_cast<uint32_t>(tensors.size());
      } else if (auto unit = units.find(source.name); unit != units.end()) {
        tensor.unit = unit->second;
      } else {
        return absl::InvalidArgumentError(absl::StrCat(
            "units names no unit for tensor '", source.name, "' of ", file.name));
      }
      tensors.push_back(std::move(tensor));
    }
  }
  if (units.size() > tensors.size()) {
    return absl::InvalidArgumentError("units names tensors that are not in the files");
  }
  return tensors;
}

bool IsContentHash(absl::string_view text) {
  constexpr absl::string_view kPrefix = "xxh3-64:";
  if (text.size() != kPrefix.size() + 16 || text.substr(0, kPrefix.size()) != kPrefix) {
    return false;
  }
  for (char c : text.substr(kPrefix.size())) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

}  // namespace

std::string ComponentId(const std::string& cache_key, const std::string& structure_hash) {
  const std::string text = absl::StrCat(cache_key, "\n", structure_hash);
  return absl::StrFormat("%016x", XXH3_64bits(text.data(), text.size()));
}

ComponentStore::ComponentStore(HostPool& pool, StoreOptions options)
    : pool_(pool), options_(std::move(options)) {}

ComponentStore::~ComponentStore() { Close(/*discard=*/false); }

bool ComponentStore::MayRead(const Caller& caller, const Component& component) {
  return caller.admin || component.info.owner_uid == caller.uid ||
         component.readers.count(caller.uid) != 0;
}

absl::Status ComponentStore::CheckUploadLimitsLocked(const Caller& caller, uint64_t bytes) const {
  if (caller.admin) return absl::OkStatus();
  size_t uploads = 0;
  uint64_t owned_bytes = 0;
  for (const auto& [key, component] : components_) {
    if (component.info.owner_uid != caller.uid) continue;
    uploads += component.info.state == ComponentState::kUploading ? 1 : 0;
    owned_bytes += HostPool::Footprint(component.info.total_bytes);
  }
  if (uploads >= options_.max_uploads_per_uid) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "uid ", caller.uid, " already has ", uploads, " uploads in progress, the limit per user (",
        options_.max_uploads_per_uid, ")"));
  }
  if (options_.max_bytes_per_uid > 0 &&
      owned_bytes + HostPool::Footprint(bytes) > options_.max_bytes_per_uid) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "uid ", caller.uid, " owns ", FormatBytes(owned_bytes), " of the pool; ",
        FormatBytes(HostPool::Footprint(bytes)), " more would pass the limit per user (",
        FormatBytes(options_.max_bytes_per_uid), "); evict components you no longer need"));
  }
  return absl::OkStatus();
}

ComponentSnapshot ComponentStore::SnapshotLocked(const Component& component) const {
  ComponentSnapshot snapshot = component.info;
  if (component.segment != nullptr) {
    snapshot.segment_name = component.segment->name();
    snapshot.segment_size = component.segment->size();
    snapshot.pinned = component.segment->pinned();
  }
  return snapshot;
}

void ComponentStore::DiscardLocked(std::map<std::string, Component>::iterator it) {
  if (it->second.segment != nullptr) {
    it->second.segment->MarkDiscarded();
  }
  components_.erase(it);
}

std::map<std::string, ComponentStore::Component>::iterator ComponentStore::FindUploadLocked(
    const std::string& upload_id) {
  return std::find_if(components_.begin(), components_.end(), [&](const auto& entry) {
    return entry.second.info.state == ComponentState::kUploading &&
           entry.second.upload_id == upload_id;
  });
}

void ComponentStore::PersistLocked() {
  if (options_.manifest_path.empty() || closed_) {
    return;
  }
  std::vector<ManifestComponent> entries;
  for (const auto& [key, component] : components_) {
    if (component.info.state != ComponentState::kReady) continue;
    entries.push_back({key, component.info.component_id, component.info.structure_hash,
                       component.info.content_hash, component.segment->name(),
                       component.segment->size(), component.info.tensors,
                       component.info.owner_uid,
                       std::vector<uid_t>(component.readers.begin(), component.readers.end()),
                       component.sources});
  }
  if (absl::Status written = WriteManifest(options_.manifest_path, entries); !written.ok()) {
    // The pool keeps working; only warm restarts suffer.
    Logger("store")->error("could not write the pool manifest: {}", written.message());
  }
}

absl::Status ComponentStore::MakeRoomLocked(const std::string& for_key, uint64_t bytes) {
  auto log = Logger("store");
  if (HostPool::Footprint(bytes) > pool_.options().budget_bytes) {
    // Evicting would empty the cache for nothing.
    return absl::ResourceExhaustedError(absl::StrCat(
        "component '", for_key, "' needs ", FormatBytes(HostPool::Footprint(bytes)),
        " of host pool, more than the whole budget of ",
        FormatBytes(pool_.options().budget_bytes), "; raise --ram-budget-gb"));
  }
  while (!pool_.Fits(bytes)) {
    auto victim = components_.end();
    for (auto it = components_.begin(); it != components_.end(); ++it) {
      const ComponentSnapshot& info = it->second.info;
      if (info.state != ComponentState::kReady || info.sessions > 0 || it->first == for_key) {
        continue;
      }
      if (victim == components_.end() || info.last_used < victim->second.info.last_used) {
        victim = it;
      }
    }
    if (victim == components_.end()) {
      const PoolUsage usage = pool_.Usage();
      return absl::ResourceExhaustedError(absl::StrCat(
          "component '", for_key, "' needs ", FormatBytes(HostPool::Footprint(bytes)),
          " of host pool, but the budget is ", FormatBytes(usage.budget_bytes), " and ",
          FormatBytes(usage.reserved_bytes),
          " is held by components in use or being uploaded (nothing left to evict); raise "
          "--ram-budget-gb or detach other runners"));
    }
    log->info("evicting '{}' ({}, unused since {}) to make room for '{}'", victim->first,
              FormatBytes(victim->second.info.total_bytes),
              absl::FormatTime("%H:%M:%S", victim->second.info.last_used, absl::LocalTimeZone()),
              for_key);
    DiscardLocked(victim);
    ++evictions_;
  }
  return absl::OkStatus();
}

absl::StatusOr<RegisterResult> ComponentStore::BeginUpload(
    const Lease& lease, const std::string& cache_key, std::vector<TensorEntry> tensors,
    const std::string& content_hash, const std::vector<FileIdentity>& sources) {
  const Caller& caller = lease.caller;
  if (cache_key.empty()) {
    return absl::InvalidArgumentError("cache_key is empty");
  }
  if (!content_hash.empty() && !IsContentHash(content_hash)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "content_hash '", content_hash, "' is not of the form xxh3-64:<16 lowercase hex digits>"));
  }
  const uint64_t span = LayOut(tensors);
  const std::string structure_hash = StructureHash(tensors);
  const std::string upload_id = RandomId();
  {
    absl::MutexLock lock(&mu_);
    if (closed_) return absl::UnavailableError("ddod is shutting down");
    if (auto it = components_.find(cache_key); it != components_.end()) {
      Component& existing = it->second;
      if (existing.info.state == ComponentState::kUploading) {
        // Another user's pid is theirs to know: name it only to the same user.
        const std::string uploader =
            existing.info.owner_uid == caller.uid
                ? absl::StrCat("pid ", existing.info.uploader_pid)
                : std::string("another user's client");
        return absl::AbortedError(absl::StrCat("'", EscapeForDisplay(cache_key),
                                               "' is being uploaded by ", uploader,
                                               "; retry after it is committed"));
      }
      const bool same = existing.info.structure_hash == structure_hash &&
                        (content_hash.empty() || existing.info.content_hash == content_hash);
      // Reading the very files this component was read from proves the caller may read it.
      const bool proved = same && !sources.empty() && sources == existing.sources;
      if (same && (MayRead(caller, existing) || proved)) {
        if (!MayRead(caller, existing)) {
          existing.readers.insert(caller.uid);
          Logger("store")->info("'{}' shared with {}: it passed the component's own files",
                                EscapeForDisplay(cache_key), caller.Describe());
          PersistLocked();
        }
        existing.info.last_used = absl::Now();
        return RegisterResult{SnapshotLocked(existing), /*warm_hit=*/true, ""};
      }
      if (existing.info.owner_uid != caller.uid && !caller.admin) {
        return absl::PermissionDeniedError(absl::StrCat(
            "'", EscapeForDisplay(cache_key),
            "' holds another user's component: only its owner may replace it, and it is shared "
            "only with users who load it from the same files; use another cache key"));
      }
      if (existing.info.sessions > 0) {
        return absl::FailedPreconditionError(absl::StrCat(
            "'", cache_key, "' holds a component with another structure or content hash (",
            existing.info.structure_hash, ") that ", existing.info.sessions,
            " session(s) use; detach them or use another key"));
      }
      Logger("store")->info("replacing '{}': new structure or content", cache_key);
      DiscardLocked(it);
      PersistLocked();
    }
    DDO_RETURN_IF_ERROR(CheckUploadLimitsLocked(caller, span));
    DDO_RETURN_IF_ERROR(MakeRoomLocked(cache_key, span));
    Component placeholder;
    placeholder.info.component_id = ComponentId(cache_key, structure_hash);
    placeholder.info.cache_key = cache_key;
    placeholder.info.structure_hash = structure_hash;
    placeholder.info.content_hash = content_hash;
    placeholder.info.state = ComponentState::kUploading;
    placeholder.info.total_bytes = TotalTensorBytes(tensors);
    placeholder.info.unit_count = CountUnits(tensors);
    placeholder.info.last_used = absl::Now();
    placeholder.info.uploader_pid = lease.client_pid;
    placeholder.info.owner_uid = caller.uid;
    placeholder.sources = sources;
    placeholder.info.tensors = std::move(tensors);
    placeholder.upload_id = upload_id;
    placeholder.owner_lease = lease.id;
    components_.emplace(cache_key, std::move(placeholder));
  }

  // Creating the segment reserves its pages: slow for big components, so outside the lock.
  const absl::Time allocating = absl::Now();
  absl::StatusOr<std::shared_ptr<PoolSegment>> segment = pool_.Allocate(span);
  const double allocate_s = absl::ToDoubleSeconds(absl::Now() - allocating);
  absl::MutexLock lock(&mu_);
  auto it = FindUploadLocked(upload_id);
  if (it == components_.end()) {
    if (segment.ok()) (*segment)->MarkDiscarded();
    return absl::AbortedError(absl::StrCat("the upload of '", cache_key,
                                           "' was abandoned: its lease ended"));
  }
  if (!segment.ok()) {
    components_.erase(it);
    return segment.status();
  }
  it->second.segment = *std::move(segment);
  Logger("store")->info("upload {} of '{}' started by {}: {} tensors, {} (segment in {:.2f} s)",
                        upload_id.substr(0, 8), EscapeForDisplay(cache_key), caller.Describe(),
                        it->second.info.tensors.size(), FormatBytes(it->second.info.total_bytes),
                        allocate_s);
  return RegisterResult{SnapshotLocked(it->second), /*warm_hit=*/false, upload_id};
}

absl::StatusOr<RegisterResult> ComponentStore::Register(const Lease& lease,
                                                        const std::string& cache_key,
                                                        std::vector<TensorEntry> tensors,
                                                        const std::string& content_hash) {
  return BeginUpload(lease, cache_key, std::move(tensors), content_hash);
}

absl::StatusOr<std::shared_ptr<PoolSegment>> ComponentStore::SegmentOfUpload(
    const std::string& lease_id, const std::string& upload_id, std::vector<TensorEntry>* tensors,
    std::string* content_hash) {
  absl::MutexLock lock(&mu_);
  auto it = FindUploadLocked(upload_id);
  if (it == components_.end() || it->second.segment == nullptr) {
    return absl::NotFoundError(absl::StrCat("no upload ", upload_id));
  }
  if (it->second.owner_lease != lease_id) {
    return absl::PermissionDeniedError(
        absl::StrCat("upload ", upload_id, " belongs to another lease"));
  }
  *tensors = it->second.info.tensors;
  *content_hash = it->second.info.content_hash;
  return it->second.segment;
}

absl::StatusOr<ComponentSnapshot> ComponentStore::Commit(const std::string& lease_id,
                                                         const std::string& upload_id) {
  std::vector<TensorEntry> tensors;
  std::string expected_hash;
  DDO_ASSIGN_OR_RETURN(std::shared_ptr<PoolSegment> segment,
                       SegmentOfUpload(lease_id, upload_id, &tensors, &expected_hash));

  // Verification and pinning read the whole segment: outside the lock.
  if (!expected_hash.empty()) {
    const std::string actual = ContentHash(tensors, segment->data());
    if (actual != expected_hash) {
      (void)Abort(lease_id, upload_id);
      return absl::InvalidArgumentError(absl::StrCat(
          "content hash mismatch: the client announced ", expected_hash, " but the bytes hash to ",
          actual, "; the upload was discarded"));
    }
  }
  const absl::Time pinning = absl::Now();
  if (absl::Status pinned = segment->Pin(); !pinned.ok()) {
    Logger("store")->warn("serving {} unpinned: {}", segment->name(), pinned.message());
  }
  const double pin_s = absl::ToDoubleSeconds(absl::Now() - pinning);

  absl::MutexLock lock(&mu_);
  auto it = FindUploadLocked(upload_id);
  if (it == components_.end()) {
    return absl::AbortedError(absl::StrCat("upload ", upload_id, " was abandoned meanwhile"));
  }
  Component& component = it->second;
  component.info.state = ComponentState::kReady;
  component.info.last_used = absl::Now();
  component.upload_id.clear();
  component.owner_lease.clear();
  Logger("store")->info("'{}' ready: {} in {}{}", component.info.cache_key,
                        FormatBytes(component.info.total_bytes), segment->name(),
                        segment->pinned() ? absl::StrFormat(", pinned in %.2f s", pin_s) : "");
  PersistLocked();
  return SnapshotLocked(component);
}

absl::StatusOr<uint64_t> ComponentStore::Abort(const std::string& lease_id,
                                               const std::string& upload_id) {
  absl::MutexLock lock(&mu_);
  auto it = FindUploadLocked(upload_id);
  if (it == components_.end()) {
    return absl::NotFoundError(absl::StrCat("no upload ", upload_id));
  }
  if (it->second.owner_lease != lease_id) {
    return absl::PermissionDeniedError(
        absl::StrCat("upload ", upload_id, " belongs to another lease"));
  }
  const uint64_t freed = it->second.segment != nullptr ? it->second.segment->size() : 0;
  Logger("store")->info("upload of '{}' aborted", it->first);
  DiscardLocked(it);
  return freed;
}

absl::StatusOr<LoadResult> ComponentStore::LoadSafetensors(
    const Lease& lease, SafetensorsRequest request,
    const std::function<void(uint64_t, uint64_t)>& progress,
    const std::function<bool()>& cancelled) {
  const absl::Time started = absl::Now();
  DDO_ASSIGN_OR_RETURN(
      SafetensorsSet set,
      OpenSafetensorsSet(std::move(request.files), std::move(request.index), cancelled));
  DDO_ASSIGN_OR_RETURN(std::vector<TensorEntry> tensors, TableOfSafetensors(set, request.units));
  // Which files these are: the same unchanged files prove a caller may read a component
  // another user loaded from them.
  std::vector<FileIdentity> sources;
  for (const SafetensorsFile& file : set.files) {
    DDO_ASSIGN_OR_RETURN(FileIdentity identity, IdentityOfFile(file.fd.get()));
    sources.push_back(identity);
  }
  std::sort(sources.begin(), sources.end());
  // Another user loaded this model from other files: the caller shares that copy, without a
  // second one, if its own files hold the same bytes (their content hash is the proof).
  if (std::optional<ProofTarget> target = FindProofTarget(
          request.cache_key, lease.caller, StructureHash(tensors), sources)) {
    DDO_ASSIGN_OR_RETURN(std::string files_hash, ContentHashOfSafetensors(set, cancelled));
    const std::string component_hash =
        !target->content_hash.empty() ? target->content_hash
                                      : ContentHash(target->tensors, target->segment->data());
    const bool announced_matches =
        request.content_hash.empty() || request.content_hash == files_hash;
    if (files_hash == component_hash && announced_matches) {
      absl::StatusOr<ComponentSnapshot> shared = AddReader(
          request.cache_key, lease.caller, target->segment->name(), component_hash);
      if (shared.ok()) {
        return LoadResult{*std::move(shared), true, absl::ToDoubleSeconds(absl::Now() - started)};
      }
    }
    // Other bytes (or the component went meanwhile): on to the ordinary rules below.
  }
  DDO_ASSIGN_OR_RETURN(RegisterResult begun, BeginUpload(lease, request.cache_key, tensors,
                                                         request.content_hash, sources));
  if (begun.warm_hit) {
    return LoadResult{std::move(begun.component), true,
                      absl::ToDoubleSeconds(absl::Now() - started)};
  }
  std::vector<TensorEntry> laid_out;
  std::string expected_hash;
  auto segment = SegmentOfUpload(lease.id, begun.upload_id, &laid_out, &expected_hash);
  if (!segment.ok()) return segment.status();

  // Positional reads of every tensor straight into its place in the segment, through the
  // descriptors the files were validated through (never reopened by path).
  std::vector<ReadJob> jobs;
  size_t index = 0;
  for (const SafetensorsFile& file : set.files) {
    for (const SafetensorsTensor& source : file.tensors) {
      jobs.push_back({file.fd.get(), source.file_offset,
                      (*segment)->data() + laid_out[index++].offset, source.byte_size,
                      file.name});
    }
  }
  const uint64_t total = set.total_bytes;
  const absl::Time reading = absl::Now();
  const absl::Status read = ReadInParallel(
      jobs, options_.read_threads, [&](uint64_t done) { progress(done, total); }, cancelled);
  const double read_s = absl::ToDoubleSeconds(absl::Now() - reading);
  if (!read.ok()) {
    (void)Abort(lease.id, begun.upload_id);
    return read;
  }
  if (cancelled()) {  // the lease ended or the caller left while the last bytes arrived
    (void)Abort(lease.id, begun.upload_id);
    return absl::CancelledError("the load was cancelled: its lease ended or its caller left");
  }
  DDO_ASSIGN_OR_RETURN(ComponentSnapshot ready, Commit(lease.id, begun.upload_id));
  const double seconds = absl::ToDoubleSeconds(absl::Now() - started);
  Logger("store")->info(
      "loaded '{}' from {} file(s): {} in {:.2f} s ({:.2f} GB/s; reading {:.2f} s on {} threads)",
      request.cache_key, set.files.size(), FormatBytes(total), seconds,
      seconds > 0 ? static_cast<double>(total) / seconds / 1e9 : 0.0, read_s,
      options_.read_threads);
  return LoadResult{std::move(ready), false, seconds};
}

absl::StatusOr<ComponentSnapshot> ComponentStore::Get(const std::string& cache_key,
                                                      const Caller& caller) const {
  absl::MutexLock lock(&mu_);
  auto it = components_.find(cache_key);
  if (it == components_.end() || it->second.info.state != ComponentState::kReady ||
      !MayRead(caller, it->second)) {
    return absl::NotFoundError(
        absl::StrCat("no component '", EscapeForDisplay(cache_key), "' in the pool"));
  }
  return SnapshotLocked(it->second);
}

std::vector<ComponentSnapshot> ComponentStore::List(const Caller& caller) const {
  absl::MutexLock lock(&mu_);
  std::vector<ComponentSnapshot> result;
  for (const auto& [key, component] : components_) {
    if (MayRead(caller, component)) result.push_back(SnapshotLocked(component));
  }
  return result;
}

void ComponentStore::DiscardUnused(const std::string& cache_key,
                                   const std::string& segment_name) {
  absl::MutexLock lock(&mu_);
  auto it = components_.find(cache_key);
  if (it == components_.end() || it->second.info.state != ComponentState::kReady ||
      it->second.info.sessions > 0 || it->second.segment == nullptr ||
      it->second.segment->name() != segment_name) {
    return;
  }
  Logger("store")->info("discarding '{}': its lease ended before the caller was answered",
                        EscapeForDisplay(cache_key));
  DiscardLocked(it);
  PersistLocked();
}

std::optional<ComponentStore::ProofTarget> ComponentStore::FindProofTarget(
    const std::string& cache_key, const Caller& caller, const std::string& structure_hash,
    const std::vector<FileIdentity>& sources) const {
  absl::MutexLock lock(&mu_);
  auto it = components_.find(cache_key);
  if (it == components_.end() || it->second.info.state != ComponentState::kReady ||
      it->second.info.structure_hash != structure_hash || MayRead(caller, it->second) ||
      it->second.sources == sources || it->second.segment == nullptr) {
    return std::nullopt;
  }
  return ProofTarget{it->second.segment, it->second.info.tensors, it->second.info.content_hash};
}

absl::StatusOr<ComponentSnapshot> ComponentStore::AddReader(const std::string& cache_key,
                                                            const Caller& caller,
                                                            const std::string& segment_name,
                                                            const std::string& content_hash) {
  absl::MutexLock lock(&mu_);
  auto it = components_.find(cache_key);
  if (it == components_.end() || it->second.info.state != ComponentState::kReady ||
      it->second.segment == nullptr || it->second.segment->name() != segment_name) {
    return absl::NotFoundError(
        absl::StrCat("'", EscapeForDisplay(cache_key), "' changed while its bytes were compared"));
  }
  Component& component = it->second;
  component.readers.insert(caller.uid);
  if (component.info.content_hash.empty()) component.info.content_hash = content_hash;
  component.info.last_used = absl::Now();
  Logger("store")->info("'{}' shared with {}: its files hold the same bytes ({})",
                        EscapeForDisplay(cache_key), caller.Describe(), content_hash);
  PersistLocked();
  return SnapshotLocked(component);
}

bool ComponentStore::MayRead(const std::string& cache_key, const Caller& caller) const {
  absl::MutexLock lock(&mu_);
  auto it = components_.find(cache_key);
  return caller.admin || (it != components_.end() && MayRead(caller, it->second));
}

absl::StatusOr<uint64_t> ComponentStore::Evict(const std::string& cache_key,
                                               const Caller& caller) {
  absl::MutexLock lock(&mu_);
  auto it = components_.find(cache_key);
  if (it == components_.end() || !MayRead(caller, it->second)) {
    return absl::NotFoundError(
        absl::StrCat("no component '", EscapeForDisplay(cache_key), "' in the pool"));
  }
  if (it->second.info.owner_uid != caller.uid && !caller.admin) {
    return absl::PermissionDeniedError(absl::StrCat(
        "'", EscapeForDisplay(cache_key),
        "' is shared with you but owned by another user: only its owner or ddod's "
        "administrator may evict it"));
  }
  if (it->second.info.state == ComponentState::kUploading) {
    return absl::FailedPreconditionError(
        absl::StrCat("'", EscapeForDisplay(cache_key), "' is being uploaded"));
  }
  if (it->second.info.sessions > 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "'", cache_key, "' is in use by ", it->second.info.sessions, " session(s)"));
  }
  const uint64_t freed = it->second.segment->size();
  Logger("store")->info("evicted '{}' at the request of {} ({})", EscapeForDisplay(cache_key),
                        caller.Describe(), FormatBytes(freed));
  DiscardLocked(it);
  PersistLocked();
  return freed;
}

absl::StatusOr<HostAttachment> ComponentStore::AttachHost(const Lease& lease,
                                                          const std::string& cache_key) {
  absl::MutexLock lock(&mu_);
  auto it = components_.find(cache_key);
  if (it == components_.end() || it->second.info.state != ComponentState::kReady ||
      !MayRead(lease.caller, it->second)) {
    return absl::NotFoundError(
        absl::StrCat("no component '", EscapeForDisplay(cache_key), "' in the pool"));
  }
  if (!lease.caller.admin) {
    size_t of_uid = 0;
    for (const auto& [id, session] : sessions_) of_uid += session.uid == lease.caller.uid ? 1 : 0;
    if (of_uid >= options_.max_sessions_per_uid) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "uid ", lease.caller.uid, " already holds ", of_uid,
          " sessions, the limit per user (", options_.max_sessions_per_uid, ")"));
    }
  }
  it->second.info.sessions += 1;
  it->second.info.last_used = absl::Now();
  const std::string session_id = RandomId();
  sessions_[session_id] = Session{lease.id, cache_key, lease.caller.uid};
  return HostAttachment{session_id, SnapshotLocked(it->second), it->second.segment};
}

absl::Status ComponentStore::SessionOwnedLocked(const std::string& session_id,
                                                const Caller& caller) const {
  auto session = sessions_.find(session_id);
  if (session == sessions_.end()) {
    return absl::NotFoundError(absl::StrCat("no session ", EscapeForDisplay(session_id, 8), "..."));
  }
  if (session->second.uid != caller.uid && !caller.admin) {
    return absl::PermissionDeniedError("that session belongs to another user");
  }
  return absl::OkStatus();
}

absl::Status ComponentStore::Detach(const std::string& session_id, const Caller& caller) {
  absl::MutexLock lock(&mu_);
  DDO_RETURN_IF_ERROR(SessionOwnedLocked(session_id, caller));
  auto session = sessions_.find(session_id);
  if (auto it = components_.find(session->second.cache_key); it != components_.end()) {
    it->second.info.sessions -= 1;
    it->second.info.last_used = absl::Now();
  }
  sessions_.erase(session);
  return absl::OkStatus();
}

absl::Status ComponentStore::CheckSessionOwner(const std::string& session_id,
                                               const Caller& caller) const {
  absl::MutexLock lock(&mu_);
  return SessionOwnedLocked(session_id, caller);
}

void ComponentStore::ReleaseLease(const std::string& lease_id) {
  absl::MutexLock lock(&mu_);
  for (auto session = sessions_.begin(); session != sessions_.end();) {
    if (session->second.lease_id != lease_id) {
      ++session;
      continue;
    }
    if (auto it = components_.find(session->second.cache_key); it != components_.end()) {
      it->second.info.sessions -= 1;
      it->second.info.last_used = absl::Now();
    }
    session = sessions_.erase(session);
  }
  for (auto it = components_.begin(); it != components_.end();) {
    if (it->second.info.state == ComponentState::kUploading &&
        it->second.owner_lease == lease_id) {
      Logger("store")->info("discarding the unfinished upload of '{}': its client went away",
                            it->first);
      auto doomed = it++;
      DiscardLocked(doomed);
    } else {
      ++it;
    }
  }
}

StoreStats ComponentStore::Stats() const {
  absl::MutexLock lock(&mu_);
  StoreStats stats;
  for (const auto& [key, component] : components_) {
    if (component.info.state != ComponentState::kReady) continue;
    ++stats.components;
    stats.used_bytes += component.info.total_bytes;
  }
  stats.sessions = static_cast<uint32_t>(sessions_.size());
  stats.evictions = evictions_;
  stats.adopted = adopted_;
  return stats;
}

std::vector<SessionSnapshot> ComponentStore::Sessions() const {
  absl::MutexLock lock(&mu_);
  std::vector<SessionSnapshot> result;
  for (const auto& [id, session] : sessions_) {
    result.push_back({id, session.lease_id, session.cache_key, session.uid});
  }
  return result;
}

void ComponentStore::AdoptPrevious() {
  auto log = Logger("store");
  std::set<std::string> kept;
  auto manifest = ReadManifest(options_.manifest_path);
  if (!manifest.ok() && !absl::IsNotFound(manifest.status())) {
    log->error("discarding the previous pool: {}", manifest.status().message());
  }
  absl::MutexLock lock(&mu_);
  for (ManifestComponent& entry : manifest.ok() ? *manifest : std::vector<ManifestComponent>{}) {
    auto reject = [&](absl::string_view why) {
      log->warn("not adopting '{}' ({}): {}", entry.cache_key, entry.segment_name, why);
    };
    if (entry.segment_name.rfind(pool_.name_prefix(), 0) != 0) {
      reject("the segment is not this pool's");
      continue;
    }
    if (components_.count(entry.cache_key) != 0) {
      reject("the manifest lists the key twice");
      continue;
    }
    if (StructureHash(entry.tensors) != entry.structure_hash ||
        ComponentId(entry.cache_key, entry.structure_hash) != entry.component_id) {
      reject("its tensor table does not match its structure hash");
      continue;
    }
    bool in_bounds = true;
    for (const TensorEntry& tensor : entry.tensors) {
      auto bytes = TensorByteSize(tensor.dtype, tensor.shape);
      in_bounds = in_bounds && bytes.ok() && *bytes == tensor.byte_size &&
                  tensor.offset + tensor.byte_size <= entry.segment_size;
    }
    if (!in_bounds) {
      reject("a tensor lies outside the segment");
      continue;
    }
    auto segment = pool_.Adopt(entry.segment_name);
    if (!segment.ok()) {
      reject(segment.status().message());
      continue;
    }
    if ((*segment)->size() != entry.segment_size) {
      reject(absl::StrCat("the segment has ", (*segment)->size(), " bytes, the manifest says ",
                          entry.segment_size, " (truncated?)"));
      continue;
    }
    if (absl::Status pinned = (*segment)->Pin(); !pinned.ok()) {
      log->warn("serving {} unpinned: {}", entry.segment_name, pinned.message());
    }
    Component component;
    component.info.component_id = entry.component_id;
    component.info.cache_key = entry.cache_key;
    component.info.structure_hash = entry.structure_hash;
    component.info.content_hash = entry.content_hash;
    component.info.state = ComponentState::kReady;
    component.info.total_bytes = TotalTensorBytes(entry.tensors);
    component.info.unit_count = CountUnits(entry.tensors);
    component.info.last_used = absl::Now();
    component.info.tensors = std::move(entry.tensors);
    component.info.owner_uid = entry.owner_uid;
    component.readers.insert(entry.readers.begin(), entry.readers.end());
    component.sources = std::move(entry.sources);
    component.segment = *std::move(segment);
    kept.insert(entry.segment_name);
    log->info("adopted '{}' ({}) from the previous ddod", entry.cache_key,
              FormatBytes(component.info.total_bytes));
    components_[entry.cache_key] = std::move(component);
    ++adopted_;
  }
  // Whatever else carries this pool's prefix is an unfinished upload or a rejected component.
  for (const std::string& name : pool_.ListSegmentNames()) {
    if (kept.count(name) == 0) {
      log->info("removing leftover segment {}", name);
      ::shm_unlink(name.c_str());
    }
  }
  PersistLocked();
}

void ComponentStore::Close(bool discard) {
  absl::MutexLock lock(&mu_);
  if (closed_) return;
  closed_ = true;
  sessions_.clear();
  for (auto it = components_.begin(); it != components_.end();) {
    auto current = it++;
    if (discard || current->second.info.state != ComponentState::kReady) {
      DiscardLocked(current);
    } else {
      components_.erase(current);  // stays in /dev/shm, listed in the manifest
    }
  }
  if (discard && !options_.manifest_path.empty()) {
    ::unlink(options_.manifest_path.c_str());
  }
}

}  // namespace ddo
