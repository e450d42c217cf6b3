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
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/common/format_bytes.h"
#include "daemon/common/logging.h"
#include "daemon/common/status_macros.h"
#include "daemon/store/component_store.h"
#include "daemon/store/direct_reader.h"
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
    if (component.files == nullptr) continue;
    all += component.files->descriptors();
    if (component.info.owner_uid == caller.uid) own += component.files->descriptors();
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

}  // namespace ddo
