// File: daemon/store/component_store_spill.cc
//
// ComponentStore's spilling of uploads (docs/architecture.md §6, "Spilling uploads"): an
// upload has no files to be demoted to, so under a RAM budget it could only be evicted. Once
// the pool is 3/4 full, every upload is queued for the spill worker, which writes it to an
// unnamed file of ddod's (spill_file.h, outside mu_) and keeps that file as the upload's
// `pooled_files`: from then on it is demoted, streamed and promoted as a loaded component is.
// The write is checked against the spill budget (SpillLedger, per uid and in all) and the
// descriptor limits first, and its result is kept only if the component did not change
// meanwhile.
//
// Thread-safety: SpillUpload takes mu_ itself and drops it while it writes;
// QueueSpillsLocked runs with mu_ held.
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "daemon/common/format_bytes.h"
#include "daemon/common/logging.h"
#include "daemon/store/component_store.h"
#include "daemon/store/spill_file.h"
#include "ddo/wire/display_text.h"

namespace ddo {

bool ComponentStore::SpillableLocked(const Component& component) {
  if (component.info.state != ComponentState::kReady || component.files != nullptr ||
      component.pooled_files != nullptr || component.spill != nullptr ||
      !component.info.base_cache_key.empty() || !component.sources.empty() ||
      component.segments.empty()) {
    return false;
  }
  for (const auto& segment : component.segments) {
    if (segment == nullptr) return false;
  }
  return true;
}

void ComponentStore::QueueSpillsLocked() {
  if (!spill_ledger_.enabled()) return;
  const PoolUsage usage = pool_.Usage();
  if (usage.reserved_bytes < usage.room_bytes() / 4 * 3) return;
  for (const auto& [key, component] : components_) {
    if (!SpillableLocked(component)) continue;
    // Queued once (by its KeyOf) until it ran; no request waits for the disk write.
    spills_.Enqueue(key, [this, uid = component.info.owner_uid, cache_key =
                                                                   component.info.cache_key](
                             const std::function<bool()>& cancelled) {
      SpillUpload(uid, cache_key, cancelled);
    });
  }
}

void ComponentStore::SpillUpload(uid_t uid, const std::string& cache_key,
                                 const std::function<bool()>& cancelled) {
  auto log = Logger("store");
  std::vector<TensorEntry> tensors;
  std::vector<std::shared_ptr<PoolSegment>> segments;
  uint64_t tier_changes = 0;
  std::shared_ptr<SpillLedger::Charge> charge;
  {
    absl::MutexLock lock(&mu_);
    auto it = components_.find(KeyOf(uid, cache_key));
    if (closed_ || it == components_.end() || !SpillableLocked(it->second)) return;
    uint64_t size = 0;
    (void)SpillLayout(it->second.info.tensors, &size);
    absl::StatusOr<std::shared_ptr<SpillLedger::Charge>> taken = spill_ledger_.Take(uid, size);
    absl::Status limits = taken.ok()
                              ? CheckBackingFileLimitsLocked(CallerFromCredentials(uid, -1, 0), 1)
                              : taken.status();
    if (!limits.ok()) {
      log->info("'{}' of uid {} is not spilled (it can only be evicted): {}",
                EscapeForDisplay(cache_key), uid, limits.message());
      return;
    }
    charge = *std::move(taken);
    tensors = it->second.info.tensors;
    segments = it->second.segments;
    tier_changes = it->second.tier_changes;
  }
  const absl::Time started = absl::Now();
  absl::StatusOr<BackingFiles> spilled = SpillToFile(
      options_.spill_directory, tensors, segments, options_.read_threads, cancelled, &fs_);
  if (!spilled.ok()) {
    log->warn("'{}' of uid {} is not spilled (it can only be evicted): {}",
              EscapeForDisplay(cache_key), uid, spilled.status().message());
    return;
  }
  absl::MutexLock lock(&mu_);
  auto it = components_.find(KeyOf(uid, cache_key));
  if (it == components_.end() || !SpillableLocked(it->second) ||
      it->second.tier_changes != tier_changes || it->second.segments != segments) {
    return;  // evicted or replaced meanwhile: the file closes with `spilled`
  }
  it->second.pooled_files = std::make_shared<const BackingFiles>(*std::move(spilled));
  it->second.spill = std::move(charge);
  log->info("'{}' of uid {} spilled to disk in {:.1f} s ({}): it goes to its file when the "
            "pool needs room",
            EscapeForDisplay(cache_key), uid, absl::ToDoubleSeconds(absl::Now() - started),
            FormatBytes(it->second.spill->bytes()));
}

}  // namespace ddo
