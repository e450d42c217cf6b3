#include "daemon/store/component_store.h"

#include <fcntl.h>
#include <linux/falloc.h>
#include <sys/mman.h>
#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <set>
#include <string>
#include <thread>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "daemon/common/format_bytes.h"
#include "daemon/common/logging.h"
#include "daemon/common/random_id.h"
#include "daemon/common/status_macros.h"
#include "daemon/store/manifest.h"
#include "daemon/store/parallel_reader.h"
#include "daemon/store/segment_fill.h"
#include "daemon/store/upload_copy.h"
#include "daemon/store/safetensors.h"
#include "daemon/store/safetensors_hash.h"
#include "ddo/wire/display_text.h"
#include "ddo/wire/posix_error.h"
#include "ddo/wire/unique_fd.h"

namespace ddo {
namespace {

// A component's keep-alive as the manifest keeps it: 0 for ddod's default, -1 for never.
int64_t KeepAliveToSeconds(absl::Duration keep_alive) {
  if (keep_alive == absl::InfiniteDuration()) return -1;
  return std::max<int64_t>(0, absl::ToInt64Seconds(keep_alive));
}

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
            "units names no unit for tensor '", EscapeForDisplay(source.name), "' of ",
            file.name));
      }
      tensors.push_back(std::move(tensor));
    }
  }
  if (units.size() > tensors.size()) {
    return absl::InvalidArgumentError("units names tensors that are not in the files");
  }
  return tensors;
}

// The pipes of a streamed upload of `cache_key`, or none when they cannot be made (out of
// descriptors): the answer is then a segment to write, which every client can take.
std::shared_ptr<UploadPipes> PipesOrNone(const std::string& cache_key, int streams) {
  absl::StatusOr<std::unique_ptr<UploadPipes>> made = UploadPipes::Create(streams);
  if (made.ok()) return *std::move(made);
  Logger("store")->warn("an upload of '{}' is written through a segment: {}",
                        EscapeForDisplay(cache_key), made.status().message());
  return nullptr;
}

}  // namespace

std::string ComponentId(const std::string& cache_key, const std::string& structure_hash) {
  const std::string text = absl::StrCat(cache_key, "\n", structure_hash);
  return absl::StrFormat("%016x", XXH3_64bits(text.data(), text.size()));
}

absl::Status CheckContentHashForm(const std::string& content_hash) {
  constexpr absl::string_view kPrefix = "xxh3-64:";
  const absl::string_view text = content_hash;
  bool valid = text.size() == kPrefix.size() + 16 && text.substr(0, kPrefix.size()) == kPrefix;
  for (char c : valid ? text.substr(kPrefix.size()) : absl::string_view()) {
    valid = valid && ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'));
  }
  if (valid) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("content_hash '", EscapeForDisplay(content_hash, 32),
                   "' is not of the form xxh3-64:<16 lowercase hex digits>"));
}

uint64_t TableHeapEstimate(const std::vector<TensorEntry>& tensors) {
  constexpr uint64_t kPerTensor = 4096;
  uint64_t bytes = 0;
  for (const TensorEntry& tensor : tensors) {
    bytes += kPerTensor + tensor.name.size() + tensor.module_path.size() +
             tensor.shape.size() * sizeof(int64_t);
  }
  return bytes;
}

std::string ComponentStore::KeyOf(uid_t uid, const std::string& cache_key) {
  return absl::StrCat(uid, ":", cache_key);
}

ComponentStore::ComponentStore(HostPool& pool, SessionRegistry& sessions, StoreOptions options)
    : pool_(pool),
      sessions_(sessions),
      options_(std::move(options)),
      fs_(options_.file_system != nullptr ? *options_.file_system : pool_.file_system()),
      clock_(options_.clock != nullptr ? options_.clock : [] { return absl::Now(); }),
      spill_ledger_(options_.spill_directory.empty() ? 0 : options_.spill_budget_bytes,
                    options_.max_spill_bytes_per_uid) {}

ComponentStore::~ComponentStore() { Close(/*discard=*/false); }

absl::Status ComponentStore::CheckUploadLimitsLocked(
    const Caller& caller, uint64_t new_bytes,
    const std::vector<std::shared_ptr<PoolSegment>>& segments,
    const std::vector<TensorEntry>& tensors, bool upload) const {
  if (caller.admin) return absl::OkStatus();
  // What the uid maps: each segment its entries use, once (a derived version and its base,
  // or an entry shared by proof, map the same pages), and the placeholders' reservations.
  size_t uploads = 0;
  std::set<const PoolSegment*> mapped;
  uint64_t mapped_bytes = 0;
  uint64_t table_bytes = 0;
  for (const auto& [key, component] : components_) {
    if (component.info.owner_uid != caller.uid) continue;
    uploads += component.info.state == ComponentState::kUploading ? 1 : 0;
    table_bytes += TableHeapEstimate(component.info.tensors);
    for (const auto& segment : component.segments) {
      if (segment == nullptr) {
        mapped_bytes += HostPool::Footprint(component.info.segment_size);  // being allocated
      } else if (mapped.insert(segment.get()).second) {
        mapped_bytes += segment->size();
      }
    }
  }
  uint64_t more = new_bytes > 0 ? HostPool::Footprint(new_bytes) : 0;
  for (const auto& segment : segments) {
    if (segment != nullptr && mapped.count(segment.get()) == 0) more += segment->size();
  }
  const uint64_t more_table = TableHeapEstimate(tensors);
  if (upload && uploads >= options_.max_uploads_per_uid) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "uid ", caller.uid, " already has ", uploads, " uploads in progress, the limit per user (",
        options_.max_uploads_per_uid, ", --max-uploads-per-user)"));
  }
  if (table_bytes + more_table > options_.max_table_bytes_per_uid) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "uid ", caller.uid, "'s tensor tables take about ", FormatBytes(table_bytes),
        " of ddod's memory; ", tensors.size(), " tensors more (about ", FormatBytes(more_table),
        ") would pass the limit per user on tensor tables (",
        FormatBytes(options_.max_table_bytes_per_uid),
        "); evict components you no longer need or group small tensors"));
  }
  if (options_.max_bytes_per_uid > 0 &&
      mapped_bytes + table_bytes + more + more_table > options_.max_bytes_per_uid) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "uid ", caller.uid, "'s components map ", FormatBytes(mapped_bytes),
        " of the pool and their tensor tables take about ", FormatBytes(table_bytes), "; ",
        FormatBytes(more), " of segments and ", FormatBytes(more_table),
        " of table more would pass the limit per user (--max-user-pool-gb, ",
        FormatBytes(options_.max_bytes_per_uid), "); evict components you no longer need"));
  }
  return absl::OkStatus();
}

ComponentSnapshot ComponentStore::SnapshotLocked(const Component& component) const {
  ComponentSnapshot snapshot = component.info;
  for (const auto& segment : component.segments) {
    snapshot.segments.push_back(segment != nullptr
                                    ? ComponentSnapshot::Segment{segment->name(), segment->size()}
                                    : ComponentSnapshot::Segment{});
  }
  if (!component.segments.empty() && component.segments.front() != nullptr) {
    snapshot.segment_name = component.segments.front()->name();
    snapshot.segment_size = component.segments.front()->size();
    snapshot.pinned = component.segments.front()->pinned();
  }
  if (component.files == nullptr) {
    snapshot.pool_bytes = component.info.total_bytes;
    snapshot.file_bytes = 0;
  } else {
    snapshot.files = component.files;
    snapshot.in_file = component.in_file;
    snapshot.file_bytes = component.info.file_bytes;
    snapshot.pool_bytes = component.info.total_bytes - component.info.file_bytes;
  }
  return snapshot;
}

uint64_t ComponentStore::DiscardLocked(std::map<std::string, Component>::iterator it) {
  std::vector<std::shared_ptr<PoolSegment>> segments = std::move(it->second.segments);
  components_.erase(it);
  uint64_t released = 0;
  for (const auto& segment : segments) {
    if (segment == nullptr) continue;
    bool used = false;
    for (const auto& [key, other] : components_) {
      used = used || std::find(other.segments.begin(), other.segments.end(), segment) !=
                         other.segments.end();
    }
    // A segment a derived version (or its base) still uses stays, in /dev/shm too: it is in
    // the manifest under that component.
    if (!used) {
      segment->MarkDiscarded();
      released += segment->size();
    }
  }
  return released;
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
    // A file-tier entry lives on descriptors, which do not outlive this ddod.
    if (component.info.state != ComponentState::kReady || component.files != nullptr) {
      continue;
    }
    ManifestComponent entry;
    entry.cache_key = component.info.cache_key;
    entry.component_id = component.info.component_id;
    entry.structure_hash = component.info.structure_hash;
    entry.content_hash = component.info.content_hash;
    for (const auto& segment : component.segments) {
      entry.segments.push_back({segment->name(), segment->size()});
    }
    entry.tensors = component.info.tensors;
    entry.owner_uid = component.info.owner_uid;
    entry.client_written = component.client_written;
    entry.sources = component.sources;
    entry.base_cache_key = component.info.base_cache_key;
    entry.base_component_id = component.info.base_component_id;
    entry.keep_alive_seconds = KeepAliveToSeconds(component.info.keep_alive);
    entries.push_back(std::move(entry));
  }
  if (absl::Status written = WriteManifest(options_.manifest_path, entries, &fs_); !written.ok()) {
    // The pool keeps working; only warm restarts suffer.
    Logger("store")->error("could not write the pool manifest: {}", written.message());
  }
}

absl::StatusOr<std::optional<ComponentSnapshot>> ComponentStore::ClearKeyLocked(
    const Caller& caller, const std::string& cache_key,
    const std::function<bool(const Component&)>& same) {
  // The caller's own name: another uid's entry under the same key is none of its business.
  auto it = components_.find(KeyOf(caller.uid, cache_key));
  if (it == components_.end()) return std::optional<ComponentSnapshot>();
  Component& existing = it->second;
  if (existing.info.state == ComponentState::kUploading) {
    return absl::AbortedError(absl::StrCat("'", EscapeForDisplay(cache_key),
                                           "' is being uploaded by pid ",
                                           existing.info.uploader_pid,
                                           "; retry after it is committed"));
  }
  // The same uid may hit its own entry by structure (and content hash): it can only poison
  // itself (docs/security.md).
  if (same(existing)) {
    existing.info.last_used = Now();
    return std::optional<ComponentSnapshot>(SnapshotLocked(existing));
  }
  if (existing.info.sessions > 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "'", EscapeForDisplay(cache_key),
        "' holds a component with another structure or content hash (",
        existing.info.structure_hash,
        existing.info.base_cache_key.empty() ? "" : ", a derived version", ") that ",
        existing.info.sessions, " session(s) use; detach them or use another key"));
  }
  Logger("store")->info("replacing '{}' of {}: new structure or content",
                        EscapeForDisplay(cache_key), caller.Describe());
  DiscardLocked(it);
  PersistLocked();
  return std::optional<ComponentSnapshot>();
}

SegmentExtents ComponentStore::OwnExtents(const std::vector<TensorEntry>& tensors) {
  SegmentExtents extents;
  for (const TensorEntry& tensor : tensors) {
    if (tensor.segment == 0) extents.emplace_back(tensor.offset, tensor.byte_size);
  }
  return extents;
}

uint64_t ComponentStore::LayOutToFill(std::vector<TensorEntry>& tensors) const {
  const uint64_t span = LayOut(tensors);
  const uint64_t grid = options_.reserve == nullptr ? 0 : options_.reserve->PinGridFor(span);
  if (grid == 0) return span;
  const uint64_t on_grid = LayOutOnGrid(tensors, grid);
  if (options_.reserve->PinGridFor(on_grid) == grid) return on_grid;
  // The grid's padding leaves it too large for the reserve: the plain layout takes it, and the
  // parts its tensors cross are registered again by the fill (AllocateToFill).
  return LayOut(tensors);
}

absl::StatusOr<std::shared_ptr<PoolSegment>> ComponentStore::AllocateToFill(
    uint64_t span, const SegmentExtents& extents, WorkProgress* progress,
    SegmentPages fresh_pages) {
  if (options_.reserve != nullptr) {
    if (std::shared_ptr<PoolSegment> ready = options_.reserve->Take(span)) {
      ready->UnpinCrossed(extents);
      return ready;
    }
  }
  return pool_.Allocate(span, progress, fresh_pages);
}

absl::StatusOr<RegisterResult> ComponentStore::AllocateUpload(const std::string& upload_id,
                                                              const std::string& cache_key,
                                                              uint64_t span, const Caller& caller,
                                                              WorkProgress* progress,
                                                              const SegmentExtents* fill_extents,
                                                              SegmentPages fresh_pages) {
  // Creating the segment reserves its pages: slow for big components, so outside the lock.
  const absl::Time allocating = absl::Now();
  // Reserved, not populated: the clients' uploads write the segment through its descriptor
  // (pwrite), so that no page is zeroed before it is filled; a load takes the pre-faulted
  // reserve's when it can (AllocateToFill).
  absl::StatusOr<std::shared_ptr<PoolSegment>> segment =
      fill_extents != nullptr ? AllocateToFill(span, *fill_extents, progress, fresh_pages)
              : pool_.Allocate(span, progress, SegmentPages::kReserved);
  const double allocate_s = absl::ToDoubleSeconds(absl::Now() - allocating);
  absl::MutexLock lock(&mu_);
  auto it = FindUploadLocked(upload_id);
  if (it == components_.end()) {
    if (segment.ok()) (*segment)->MarkDiscarded();
    return absl::AbortedError(absl::StrCat("the upload of '", EscapeForDisplay(cache_key),
                                           "' was abandoned: its lease ended"));
  }
  if (!segment.ok()) {
    DiscardLocked(it);
    return segment.status();
  }
  it->second.segments.front() = *std::move(segment);
  const ComponentSnapshot& info = it->second.info;
  Logger("store")->info(
      "upload {} of '{}' started by {}: {} tensors, {}{} (segment in {:.2f} s)",
      upload_id.substr(0, 8), EscapeForDisplay(cache_key), caller.Describe(),
      info.tensors.size(), FormatBytes(info.total_bytes),
      info.base_cache_key.empty()
          ? ""
          : absl::StrCat(", derived from '", EscapeForDisplay(info.base_cache_key), "': ",
                         info.changed_tensors, " tensors (", FormatBytes(info.own_bytes),
                         ") stored anew"),
      allocate_s);
  return RegisterResult{SnapshotLocked(it->second), /*warm_hit=*/false, upload_id, {}};
}

void ComponentStore::AddPlaceholderLocked(const Lease& lease, const std::string& upload_id,
                                          uint64_t span, bool client_written,
                                          Component placeholder) {
  ComponentSnapshot& info = placeholder.info;
  info.component_id = ComponentId(info.cache_key, info.structure_hash);
  info.state = ComponentState::kUploading;
  info.last_used = Now();
  info.uploader_pid = lease.client_pid;
  info.owner_uid = lease.caller.uid;
  info.segment_size = HostPool::Footprint(span);
  placeholder.client_written = client_written;
  placeholder.upload_id = upload_id;
  placeholder.owner_lease = lease.id;
  const std::string key = KeyOf(lease.caller.uid, info.cache_key);
  components_.emplace(key, std::move(placeholder));
}

absl::StatusOr<RegisterResult> ComponentStore::BeginUpload(
    const Lease& lease, const std::string& cache_key, std::vector<TensorEntry> tensors,
    const std::string& content_hash, const std::vector<FileIdentity>& sources,
    WorkProgress* progress, UploadRoute route, int streams, bool* refused_for_room) {
  const Caller& caller = lease.caller;
  if (cache_key.empty()) {
    return absl::InvalidArgumentError("cache_key is empty");
  }
  if (!content_hash.empty()) DDO_RETURN_IF_ERROR(CheckContentHashForm(content_hash));
  std::shared_ptr<UploadPipes> pipes;
  if (route == UploadRoute::kStreamed) {
    pipes = PipesOrNone(cache_key, streams);
    if (pipes == nullptr) route = UploadRoute::kSegment;
  }
  for (TensorEntry& tensor : tensors) tensor.segment = 0;
  // A segment the client writes is its own, copied at commit; one that ddod's readers fill
  // (from files or from a streamed upload's pipes) comes from the pre-faulted reserve.
  const bool client_writes_segment = route == UploadRoute::kSegment;
  const uint64_t span = client_writes_segment ? LayOut(tensors) : LayOutToFill(tensors);
  const SegmentExtents extents = client_writes_segment ? SegmentExtents() : OwnExtents(tensors);
  const std::string structure_hash = StructureHash(tensors);
  const std::string upload_id = RandomId();
  {
    absl::MutexLock lock(&mu_);
    if (closed_) return absl::UnavailableError("ddod is shutting down");
    // A derived version is never the answer to a plain registration: its bytes are not all
    // the ones this table would upload.
    auto same = [&](const Component& existing) {
      return existing.info.base_cache_key.empty() &&
             existing.info.structure_hash == structure_hash &&
             (content_hash.empty() || existing.info.content_hash == content_hash);
    };
    DDO_ASSIGN_OR_RETURN(std::optional<ComponentSnapshot> warm,
                         ClearKeyLocked(caller, cache_key, same));
    if (warm.has_value()) return RegisterResult{*std::move(warm), /*warm_hit=*/true, "", {}};
    DDO_RETURN_IF_ERROR(CheckUploadLimitsLocked(caller, span, {}, tensors));
    if (absl::Status room = MakeRoomLocked(KeyOf(caller.uid, cache_key), span); !room.ok()) {
      if (refused_for_room != nullptr) *refused_for_room = true;
      return room;
    }
    Component placeholder;
    placeholder.info.cache_key = cache_key;
    placeholder.info.structure_hash = structure_hash;
    placeholder.info.content_hash = content_hash;
    placeholder.info.total_bytes = TotalTensorBytes(tensors);
    placeholder.info.own_bytes = placeholder.info.total_bytes;
    placeholder.info.unit_count = CountUnits(tensors);
    placeholder.info.tensors = std::move(tensors);
    placeholder.sources = sources;
    placeholder.segments = {nullptr};
    placeholder.pipes = pipes;
    placeholder.streamed = pipes != nullptr;
    AddPlaceholderLocked(lease, upload_id, span, /*client_written=*/route != UploadRoute::kLoad,
                         std::move(placeholder));
  }
  // A streamed upload's readers write through the mapping: a fresh segment's pages are
  // populated now, not faulted in one at a time as the bytes arrive.
  absl::StatusOr<RegisterResult> begun = AllocateUpload(
      upload_id, cache_key, span, caller, progress, client_writes_segment ? nullptr : &extents,
      pipes != nullptr ? SegmentPages::kPopulated : SegmentPages::kReserved);
  if (begun.ok() && pipes != nullptr) {
    for (UniqueFd& write_end : pipes->TakeWriteEnds()) {
      begun->stream_write_ends.push_back(std::make_shared<const UniqueFd>(std::move(write_end)));
    }
  }
  return begun;
}

absl::StatusOr<RegisterResult> ComponentStore::Register(const Lease& lease,
                                                        const std::string& cache_key,
                                                        std::vector<TensorEntry> tensors,
                                                        const std::string& content_hash,
                                                        WorkProgress* progress, int streams) {
  streams = std::min({streams, options_.read_threads, kMaxUploadStreams});
  return BeginUpload(lease, cache_key, std::move(tensors), content_hash, {}, progress,
                     streams > 0 ? UploadRoute::kStreamed : UploadRoute::kSegment, streams);
}

absl::StatusOr<ComponentBytes> ComponentStore::BytesOfUpload(const std::string& lease_id,
                                                             const std::string& upload_id,
                                                             std::vector<TensorEntry>* tensors,
                                                             std::string* content_hash,
                                                             bool* client_written,
                                                             std::shared_ptr<UploadPipes>* pipes) {
  absl::MutexLock lock(&mu_);
  auto it = FindUploadLocked(upload_id);
  if (it == components_.end() || it->second.segments.empty() ||
      it->second.segments.front() == nullptr) {
    return absl::NotFoundError(absl::StrCat("no upload ", EscapeForDisplay(upload_id, 32)));
  }
  if (it->second.owner_lease != lease_id) {
    return absl::PermissionDeniedError(
        absl::StrCat("upload ", EscapeForDisplay(upload_id, 32), " belongs to another lease"));
  }
  if (pipes != nullptr) {
    if (it->second.streamed && it->second.pipes == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat(
          "upload ", EscapeForDisplay(upload_id, 32), " is being committed by another call"));
    }
    *pipes = std::move(it->second.pipes);
  }
  *tensors = it->second.info.tensors;
  *content_hash = it->second.info.content_hash;
  if (client_written != nullptr) *client_written = it->second.client_written;
  return ComponentBytes(it->second.segments);
}

absl::Status ComponentStore::FillFromStreams(const std::string& lease_id,
                                             const std::string& upload_id,
                                             const std::vector<TensorEntry>& tensors,
                                             UploadPipes& pipes, const ComponentBytes& bytes,
                                             WorkProgress* progress) {
  const absl::Time streaming = absl::Now();
  const SegmentExtents extents = OwnExtents(tensors);
  uint64_t total = 0;
  for (const auto& [offset, size] : extents) total += size;
  if (progress != nullptr) progress->SetTotal(total);
  const int count = pipes.count();
  absl::Status filled =
      pipes.Fill(*bytes.own(), StreamRanges(tensors, AssignStreams(tensors, count), count),
                 progress, [progress] { return progress != nullptr && progress->cancelled(); });
  if (!filled.ok()) {
    (void)Abort(lease_id, upload_id);
    return filled;
  }
  const double seconds = absl::ToDoubleSeconds(absl::Now() - streaming);
  Logger("store")->info("upload {} streamed into {}: {} in {:.2f} s ({:.2f} GB/s on {} streams{})",
                        upload_id.substr(0, 8), bytes.own()->name(), FormatBytes(total), seconds,
                        seconds > 0 ? static_cast<double>(total) / seconds / 1e9 : 0.0, count,
                        bytes.own()->prefaulted() ? ", into the pre-faulted reserve" : "");
  return absl::OkStatus();
}

absl::Status ComponentStore::CopyClientUpload(const std::string& lease_id,
                                              const std::string& upload_id,
                                              const std::vector<TensorEntry>& tensors,
                                              ComponentBytes& bytes, WorkProgress* progress) {
  // What the client wrote is copied into the segment served: its writable mapping stays
  // on the upload segment, which is gone after the copy (docs/security.md §3).
  const absl::Time copying = absl::Now();
  // The client's bar counts the copy (the hash of the copy that follows is an XXH3 pass).
  if (progress != nullptr) progress->SetTotal(bytes.own()->size());
  std::vector<ByteRange> extents;
  for (const TensorEntry& tensor : tensors) {
    if (tensor.segment == 0) extents.push_back({tensor.offset, tensor.byte_size});
  }
  absl::StatusOr<std::shared_ptr<PoolSegment>> copy =
      CopyUploadSegment(pool_, fs_, *bytes.own(), extents, options_.read_threads, progress);
  if (!copy.ok()) {
    (void)Abort(lease_id, upload_id);
    return copy.status();
  }
  {
    absl::MutexLock lock(&mu_);
    auto it = FindUploadLocked(upload_id);
    if (it == components_.end()) {
      (*copy)->MarkDiscarded();
      return absl::AbortedError(absl::StrCat("upload ", upload_id, " was abandoned meanwhile"));
    }
    it->second.segments.front()->MarkDiscarded();
    it->second.segments.front() = *copy;
    bytes = ComponentBytes(it->second.segments);
  }
  Logger("store")->info("upload {} copied into {}: {} in {:.2f} s", upload_id.substr(0, 8),
                        (*copy)->name(), FormatBytes((*copy)->size()),
                        absl::ToDoubleSeconds(absl::Now() - copying));
  return absl::OkStatus();
}

absl::StatusOr<ComponentSnapshot> ComponentStore::Commit(const std::string& lease_id,
                                                         const std::string& upload_id,
                                                         WorkProgress* progress) {
  std::vector<TensorEntry> tensors;
  std::string expected_hash;
  bool client_written = false;
  std::shared_ptr<UploadPipes> pipes;
  DDO_ASSIGN_OR_RETURN(ComponentBytes bytes,
                       BytesOfUpload(lease_id, upload_id, &tensors, &expected_hash,
                                     &client_written, &pipes));
  uint64_t to_hash = 0;
  if (!expected_hash.empty()) {
    for (const TensorEntry& tensor : tensors) {
      if (tensor.segment == 0) to_hash += tensor.byte_size;
    }
  }
  if (pipes != nullptr) {
    DDO_RETURN_IF_ERROR(FillFromStreams(lease_id, upload_id, tensors, *pipes, bytes, progress));
  } else if (client_written) {
    DDO_RETURN_IF_ERROR(CopyClientUpload(lease_id, upload_id, tensors, bytes, progress));
  } else if (progress != nullptr) {
    progress->SetTotal(to_hash);
  }

  // Verification and pinning read the whole segment: outside the lock, and at the same time
  // (pinning is the kernel's and the driver's work, hashing this thread's: together they take
  // the longer of the two). Only the component's own segment was written (a derived version's
  // shared tensors are its base's, verified).
  const std::shared_ptr<PoolSegment>& segment = bytes.own();
  const absl::Time pinning = absl::Now();
  absl::Status pinned;
  double pin_s = 0;
  std::thread pinner([&] {
    pinned = segment->Pin();
    pin_s = absl::ToDoubleSeconds(absl::Now() - pinning);
  });
  std::string actual;
  if (!expected_hash.empty()) {
    actual = OwnContentHash(tensors, bytes, client_written ? nullptr : progress);
  }
  pinner.join();
  if (actual != expected_hash) {
    (void)Abort(lease_id, upload_id);  // the segment is unpinned when its last user lets go
    return absl::InvalidArgumentError(absl::StrCat(
        "content hash mismatch: the client announced ", expected_hash, " but the bytes hash to ",
        actual, "; the upload was discarded"));
  }
  if (!pinned.ok()) {
    Logger("store")->warn("serving {} unpinned: {}", segment->name(), pinned.message());
  }

  absl::MutexLock lock(&mu_);
  auto it = FindUploadLocked(upload_id);
  if (it == components_.end()) {
    return absl::AbortedError(absl::StrCat("upload ", upload_id, " was abandoned meanwhile"));
  }
  Component& component = it->second;
  component.info.state = ComponentState::kReady;
  component.info.last_used = Now();
  component.upload_id.clear();
  component.owner_lease.clear();
  Logger("store")->info("'{}' ready: {} in {}{}", EscapeForDisplay(component.info.cache_key),
                        FormatBytes(component.info.own_bytes), segment->name(),
                        segment->pinned() ? absl::StrFormat(", pinned in %.2f s", pin_s) : "");
  PersistLocked();
  ComponentSnapshot ready = SnapshotLocked(component);
  QueueSpillsLocked();
  return ready;
}

absl::StatusOr<uint64_t> ComponentStore::Abort(const std::string& lease_id,
                                               const std::string& upload_id) {
  absl::MutexLock lock(&mu_);
  auto it = FindUploadLocked(upload_id);
  if (it == components_.end()) {
    return absl::NotFoundError(absl::StrCat("no upload ", EscapeForDisplay(upload_id, 32)));
  }
  if (it->second.owner_lease != lease_id) {
    return absl::PermissionDeniedError(
        absl::StrCat("upload ", EscapeForDisplay(upload_id, 32), " belongs to another lease"));
  }
  Logger("store")->info("upload of '{}' aborted", EscapeForDisplay(it->first));
  return DiscardLocked(it);
}

absl::StatusOr<LoadResult> ComponentStore::LoadSafetensors(
    const Lease& lease, SafetensorsRequest request,
    const std::function<void(uint64_t, uint64_t)>& progress,
    const std::function<bool()>& cancelled) {
  const absl::Time started = absl::Now();
  DDO_ASSIGN_OR_RETURN(
      SafetensorsSet set,
      OpenSafetensorsSet(std::move(request.files), std::move(request.index), cancelled, &fs_));
  DDO_ASSIGN_OR_RETURN(std::vector<TensorEntry> tensors, TableOfSafetensors(set, request.units));
  // Which files these are: a hint for which other user's copy to compare them with, never a
  // proof (a write through MAP_SHARED leaves a file's identity as it was).
  std::vector<FileIdentity> sources;
  for (const SafetensorsFile& file : set.files) {
    DDO_ASSIGN_OR_RETURN(FileIdentity identity, IdentityOfFile(file.fd.get()));
    sources.push_back(identity);
  }
  std::sort(sources.begin(), sources.end());
  // Another user loaded this model from other files: the caller shares that copy, without a
  // second one, if its own files hold the same bytes. The proof is SHA-256, which ddod
  // computes itself on both sides: the XXH3 content hash is not collision resistant, and a
  // user could otherwise plant its bytes under another user's model (docs/security.md).
  if (std::vector<ProofTarget> targets = FindProofTargets(
          request.cache_key, lease.caller, StructureHash(tensors), sources);
      !targets.empty()) {
    DDO_ASSIGN_OR_RETURN(
        std::optional<ComponentSnapshot> shared,
        ShareByProof(lease, request.cache_key, set, sources, request.content_hash, targets,
                     cancelled));
    if (shared.has_value()) {
      return LoadResult{*std::move(shared), true, absl::ToDoubleSeconds(absl::Now() - started)};
    }
    // Other bytes (or the component went meanwhile): on to the ordinary rules below.
  }
  if (request.file_tier == FileTier::kPrefer) {
    DDO_ASSIGN_OR_RETURN(LoadResult loaded, LoadFileBacked(lease, request, set,
                                                           std::move(tensors), sources,
                                                           cancelled));
    loaded.seconds = absl::ToDoubleSeconds(absl::Now() - started);
    return loaded;
  }
  bool refused_for_room = false;
  absl::StatusOr<RegisterResult> begun =
      BeginUpload(lease, request.cache_key, tensors, request.content_hash, sources, nullptr,
                  UploadRoute::kLoad, /*streams=*/0, &refused_for_room);
  if (!begun.ok() && refused_for_room && request.file_tier == FileTier::kAuto) {
    Logger("store")->info("'{}' does not fit the pool ({}): serving it from its {} file(s)",
                          EscapeForDisplay(request.cache_key), begun.status().message(),
                          set.files.size());
    absl::StatusOr<LoadResult> loaded =
        LoadFileBacked(lease, request, set, std::move(tensors), sources, cancelled);
    if (absl::IsResourceExhausted(loaded.status())) {
      return absl::ResourceExhaustedError(absl::StrCat(begun.status().message(),
                                                       "; nor can the file tier keep it: ",
                                                       loaded.status().message()));
    }
    if (loaded.ok() && !loaded->warm_hit) {
      loaded->component = PromoteToFit(lease.caller, loaded->component, cancelled);
    }
    if (loaded.ok()) loaded->seconds = absl::ToDoubleSeconds(absl::Now() - started);
    return loaded;
  }
  if (!begun.ok()) return begun.status();
  if (begun->warm_hit) {
    return LoadResult{std::move(begun->component), true,
                      absl::ToDoubleSeconds(absl::Now() - started)};
  }
  DDO_ASSIGN_OR_RETURN(ComponentSnapshot ready,
                       ReadAndCommit(lease, *begun, set, progress, cancelled, started));
  KeepBackingFiles(lease.caller, ready, set);  // so that it can be demoted, not discarded
  return LoadResult{std::move(ready), false, absl::ToDoubleSeconds(absl::Now() - started)};
}

absl::StatusOr<ComponentSnapshot> ComponentStore::ReadAndCommit(
    const Lease& lease, const RegisterResult& begun, const SafetensorsSet& set,
    const std::function<void(uint64_t, uint64_t)>& progress,
    const std::function<bool()>& cancelled, absl::Time started) {
  std::vector<TensorEntry> laid_out;
  std::string expected_hash;
  absl::StatusOr<ComponentBytes> bytes =
      BytesOfUpload(lease.id, begun.upload_id, &laid_out, &expected_hash);
  if (!bytes.ok()) return bytes.status();

  absl::StatusOr<FillTimes> filled =
      FillSegmentFromFiles(set, laid_out, *bytes->own(), options_.read_threads, progress,
                           cancelled, &fs_);
  if (!filled.ok()) {
    (void)Abort(lease.id, begun.upload_id);
    return filled.status();
  }
  if (cancelled()) {  // the lease ended or the caller left while the last bytes arrived
    (void)Abort(lease.id, begun.upload_id);
    return absl::CancelledError("the load was cancelled: its lease ended or its caller left");
  }
  DDO_ASSIGN_OR_RETURN(ComponentSnapshot ready, Commit(lease.id, begun.upload_id));
  const double seconds = absl::ToDoubleSeconds(absl::Now() - started);
  Logger("store")->info(
      "loaded '{}' from {} file(s): {} in {:.2f} s ({:.2f} GB/s; reading {:.2f} s on {} threads{}{}, "
      "{})",
      ready.cache_key, set.files.size(), FormatBytes(set.total_bytes), seconds,
      seconds > 0 ? static_cast<double>(set.total_bytes) / seconds / 1e9 : 0.0, filled->read_s,
      options_.read_threads, filled->direct ? ", past the page cache" : "",
      bytes->own()->prefaulted() ? " into the pre-faulted reserve" : "",
      filled->pinned ? absl::StrFormat("pinned as it was read, %.2f s after", filled->pin_wait_s)
                     : std::string("not pinned while reading"));
  return ready;
}

absl::StatusOr<ComponentSnapshot> ComponentStore::Get(const std::string& cache_key,
                                                      const Caller& caller) const {
  absl::MutexLock lock(&mu_);
  auto it = components_.find(KeyOf(caller.uid, cache_key));
  if (it == components_.end() || it->second.info.state != ComponentState::kReady) {
    return absl::NotFoundError(
        absl::StrCat("no component '", EscapeForDisplay(cache_key), "' in the pool"));
  }
  return SnapshotLocked(it->second);
}

std::vector<ComponentSnapshot> ComponentStore::List(const Caller& caller) const {
  absl::MutexLock lock(&mu_);
  std::vector<ComponentSnapshot> result;
  for (const auto& [key, component] : components_) {
    if (caller.admin || component.info.owner_uid == caller.uid) {
      result.push_back(SnapshotLocked(component));
    }
  }
  return result;
}

void ComponentStore::DiscardUnused(uid_t owner, const std::string& cache_key,
                                   const std::string& segment_name) {
  absl::MutexLock lock(&mu_);
  auto it = components_.find(KeyOf(owner, cache_key));
  if (it == components_.end() || it->second.info.state != ComponentState::kReady ||
      it->second.info.sessions > 0 || it->second.segments.empty() ||
      it->second.segments.front() == nullptr ||
      it->second.segments.front()->name() != segment_name) {
    return;
  }
  Logger("store")->info("discarding '{}': its lease ended before the caller was answered",
                        EscapeForDisplay(cache_key));
  DiscardLocked(it);
  PersistLocked();
}

bool ComponentStore::MayRead(const std::string& cache_key, const Caller& caller) const {
  absl::MutexLock lock(&mu_);
  return components_.count(KeyOf(caller.uid, cache_key)) != 0;
}

absl::StatusOr<std::map<std::string, ComponentStore::Component>::iterator>
ComponentStore::FindOwnedLocked(const std::string& cache_key, const Caller& caller,
                                std::optional<uid_t> owner) {
  if (owner.has_value() && *owner != caller.uid && !caller.admin) {
    return absl::PermissionDeniedError(
        "only ddod's administrator may name another user's component");
  }
  auto it = components_.find(KeyOf(owner.value_or(caller.uid), cache_key));
  if (it == components_.end()) {
    return absl::NotFoundError(
        absl::StrCat("no component '", EscapeForDisplay(cache_key), "' in the pool",
                     owner.has_value() ? absl::StrCat(" for uid ", *owner) : ""));
  }
  return it;
}

absl::StatusOr<HostAttachment> ComponentStore::AttachHost(const Lease& lease,
                                                          const std::string& cache_key) {
  absl::MutexLock lock(&mu_);
  auto it = components_.find(KeyOf(lease.caller.uid, cache_key));
  if (it == components_.end() || it->second.info.state != ComponentState::kReady) {
    return absl::NotFoundError(
        absl::StrCat("no component '", EscapeForDisplay(cache_key), "' in the pool"));
  }
  DDO_ASSIGN_OR_RETURN(const std::string session_id, sessions_.Add(lease, cache_key));
  it->second.info.sessions += 1;
  it->second.info.last_used = Now();
  return HostAttachment{session_id, SnapshotLocked(it->second),
                        it->second.files != nullptr
                            ? ComponentBytes(it->second.segments, it->second.files,
                                             it->second.in_file)
                            : ComponentBytes(it->second.segments)};
}

void ComponentStore::UnpinLocked(uid_t uid, const std::string& cache_key) {
  if (auto it = components_.find(KeyOf(uid, cache_key)); it != components_.end()) {
    it->second.info.sessions -= 1;
    it->second.info.last_used = Now();
  }
}

absl::Status ComponentStore::Detach(const std::string& session_id, const Caller& caller) {
  absl::MutexLock lock(&mu_);
  DDO_RETURN_IF_ERROR(sessions_.FindFor(session_id, caller).status());
  if (std::optional<SessionRecord> session = sessions_.Remove(session_id)) {
    UnpinLocked(session->uid, session->cache_key);
  }
  return absl::OkStatus();
}

void ComponentStore::ReleaseLease(const std::string& lease_id) {
  absl::MutexLock lock(&mu_);
  for (const SessionRecord& session : sessions_.RemoveLease(lease_id)) {
    UnpinLocked(session.uid, session.cache_key);
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

std::map<int64_t, uint64_t> ComponentStore::UploadingBytesByPid() const {
  absl::MutexLock lock(&mu_);
  std::map<int64_t, uint64_t> bytes;
  for (const auto& [key, component] : components_) {
    if (component.upload_id.empty() || !component.client_written) continue;
    bytes[component.info.uploader_pid] += component.info.segment_size;
  }
  return bytes;
}

StoreStats ComponentStore::Stats() const {
  absl::MutexLock lock(&mu_);
  StoreStats stats;
  // What is mapped: each segment once, however many entries use it.
  std::set<const PoolSegment*> counted;
  for (const auto& [key, component] : components_) {
    if (component.info.state != ComponentState::kReady) continue;
    ++stats.components;
    if (component.files != nullptr) {
      stats.file_bytes += component.info.file_bytes;
      stats.backing_files += static_cast<uint32_t>(component.files->descriptors());
    }
    if (component.pooled_files != nullptr) {
      stats.backing_files += static_cast<uint32_t>(component.pooled_files->descriptors());
    }
    if (component.spill != nullptr) stats.spilled_bytes += component.spill->bytes();  // written
    for (const auto& segment : component.segments) {
      if (segment != nullptr && counted.insert(segment.get()).second) {
        stats.used_bytes += segment->size();
      }
    }
  }
  stats.sessions = static_cast<uint32_t>(sessions_.size());
  stats.evictions = evictions_;
  stats.adopted = adopted_;
  if (options_.reserve != nullptr) stats.prefaulted_ready_bytes = options_.reserve->ready_bytes();
  return stats;
}

void ComponentStore::Close(bool discard) {
  spills_.Stop();  // before mu_: a spill takes it
  absl::MutexLock lock(&mu_);
  if (closed_) return;
  closed_ = true;
  for (auto it = components_.begin(); it != components_.end();) {
    auto current = it++;
    if (discard || current->second.info.state != ComponentState::kReady) {
      DiscardLocked(current);
    } else {
      components_.erase(current);  // stays in /dev/shm, listed in the manifest
    }
  }
  if (discard && !options_.manifest_path.empty()) {
    (void)fs_.Unlink(options_.manifest_path);
  }
}

}  // namespace ddo
