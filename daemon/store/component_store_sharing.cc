// File: daemon/store/component_store_sharing.cc
//
// ComponentStore's sharing by proof: another user's copy of the same files is shared, not
// loaded again, once ddod proved by SHA-256 (computed by ddod on both sides) that the
// caller's files hold its bytes (docs/security.md). The hashing runs outside the store's
// mu_; finding the candidates, remembering their digests and adding the shared entry take it.
#include <algorithm>
#include <atomic>
#include <functional>
#include <future>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/common/logging.h"
#include "daemon/common/status_macros.h"
#include "daemon/store/component_store.h"
#include "daemon/store/safetensors_hash.h"
#include "ddo/wire/display_text.h"

namespace ddo {

std::vector<ComponentStore::ProofTarget> ComponentStore::FindProofTargets(
    const std::string& cache_key, const Caller& caller, const std::string& structure_hash,
    const std::vector<FileIdentity>& sources) const {
  absl::MutexLock lock(&mu_);
  if (auto own = components_.find(KeyOf(caller.uid, cache_key));
      own != components_.end() && own->second.info.state == ComponentState::kReady &&
      own->second.info.structure_hash == structure_hash) {
    return {};  // the caller's own entry: its warm hit or its replacement
  }
  // (rank, last use, key): the candidates the hint names, best first.
  std::vector<std::tuple<int, absl::Time, std::string>> ranked;
  for (auto it = components_.begin(); it != components_.end(); ++it) {
    const Component& other = it->second;
    // Never shared by proof: an upload from memory (ddod did not read it from files, and
    // docs/security.md promises it stays its owner's), a derived version (its owner's edit
    // of a model) and a file-tier entry (its bytes are in a file its owner can change), nor
    // one read back from such files after its load (Promote).
    if (other.info.owner_uid == caller.uid || other.info.state != ComponentState::kReady ||
        other.info.structure_hash != structure_hash || other.client_written ||
        other.sources.empty() || !other.info.base_cache_key.empty() ||
        other.files != nullptr || other.reread ||
        other.segments.empty() || other.segments.front() == nullptr) {
      continue;
    }
    // The hint: the same files first, then the same key; the proof decides either way.
    const int rank = other.sources == sources ? 2 : other.info.cache_key == cache_key ? 1 : 0;
    if (rank > 0) ranked.emplace_back(rank, other.info.last_used, it->first);
  }
  std::sort(ranked.begin(), ranked.end(), std::greater<>());
  // Each candidate costs a pass over its bytes the first time: a few, so that another user's
  // entry under the same key cannot hide the one the caller's files match.
  constexpr size_t kMaxCandidates = 4;
  std::vector<ProofTarget> targets;
  for (const auto& [rank, used, key] : ranked) {
    if (targets.size() == kMaxCandidates) break;
    const Component& other = components_.at(key);
    targets.push_back(ProofTarget{key, ComponentBytes(other.segments), other.info.tensors,
                                  other.proof_digest, other.info.content_hash});
  }
  return targets;
}

absl::StatusOr<std::optional<ComponentSnapshot>> ComponentStore::ShareByProof(
    const Lease& lease, const std::string& cache_key, const SafetensorsSet& set,
    const std::vector<FileIdentity>& sources, const std::string& announced_hash,
    std::vector<ProofTarget>& targets, const std::function<bool()>& cancelled) {
  // The first candidate's digest, when no proof computed it yet, alongside the files'.
  std::atomic<bool> files_failed{false};
  const std::function<bool()> stop = [&] { return files_failed.load() || cancelled(); };
  ProofTarget& first = targets.front();
  std::future<absl::StatusOr<std::string>> first_digest;
  if (first.proof_digest.empty()) {
    first_digest = std::async(std::launch::async, [&first, &stop] {
      return ProofDigest(first.tensors, first.bytes, stop);
    });
  }
  absl::StatusOr<SafetensorsHashes> files = HashSafetensors(set, cancelled, &fs_);
  files_failed = !files.ok();
  if (first_digest.valid()) {
    absl::StatusOr<std::string> digest = first_digest.get();
    if (!digest.ok() && files.ok()) return digest.status();  // cancelled
    if (digest.ok()) {
      first.proof_digest = *digest;
      RememberProofDigest(first.key, first.bytes.own()->name(), *digest);
    }
  }
  if (!files.ok()) return files.status();
  // A client that announced a content hash gets the bytes it announced or nothing.
  if (!announced_hash.empty() && announced_hash != files->content_hash) return std::nullopt;
  for (ProofTarget& target : targets) {
    // The XXH3 content hash only skips a candidate that surely differs; SHA-256 decides.
    if (!target.content_hash.empty() && target.content_hash != files->content_hash) continue;
    if (target.proof_digest.empty()) {
      DDO_ASSIGN_OR_RETURN(target.proof_digest,
                           ProofDigest(target.tensors, target.bytes, cancelled));
      RememberProofDigest(target.key, target.bytes.own()->name(), target.proof_digest);
    }
    if (files->proof_digest != target.proof_digest) continue;
    absl::StatusOr<ComponentSnapshot> shared =
        AddSharedEntry(lease, cache_key, target.key, target.bytes.own()->name(),
                       files->content_hash, target.proof_digest, sources);
    if (absl::IsNotFound(shared.status())) continue;  // it went meanwhile
    if (!shared.ok()) return shared.status();
    return std::optional<ComponentSnapshot>(*std::move(shared));
  }
  return std::nullopt;
}

void ComponentStore::RememberProofDigest(const std::string& key,
                                         const std::string& segment_name,
                                         const std::string& proof_digest) {
  absl::MutexLock lock(&mu_);
  auto it = components_.find(key);
  if (it == components_.end() || it->second.info.state != ComponentState::kReady ||
      it->second.segments.empty() || it->second.segments.front() == nullptr ||
      it->second.segments.front()->name() != segment_name) {
    return;  // replaced or evicted meanwhile
  }
  it->second.proof_digest = proof_digest;
}

absl::StatusOr<ComponentSnapshot> ComponentStore::AddSharedEntry(
    const Lease& lease, const std::string& cache_key, const std::string& target_key,
    const std::string& segment_name, const std::string& content_hash,
    const std::string& proof_digest, const std::vector<FileIdentity>& sources) {
  const Caller& caller = lease.caller;
  absl::MutexLock lock(&mu_);
  if (closed_) return absl::UnavailableError("ddod is shutting down");
  auto target = components_.find(target_key);
  if (target == components_.end() || target->second.info.state != ComponentState::kReady ||
      target->second.segments.empty() || target->second.segments.front() == nullptr ||
      target->second.segments.front()->name() != segment_name) {
    return absl::NotFoundError(
        absl::StrCat("'", EscapeForDisplay(cache_key), "' changed while its bytes were compared"));
  }
  const Component& proved = target->second;
  const std::string structure_hash = proved.info.structure_hash;
  auto same = [&](const Component& existing) {
    return existing.info.base_cache_key.empty() &&
           existing.info.structure_hash == structure_hash &&
           existing.info.content_hash == content_hash;
  };
  DDO_ASSIGN_OR_RETURN(std::optional<ComponentSnapshot> warm,
                       ClearKeyLocked(caller, cache_key, same));
  if (warm.has_value()) return *std::move(warm);
  // ClearKeyLocked removed only the caller's own entry: the target is another uid's.
  DDO_RETURN_IF_ERROR(CheckUploadLimitsLocked(caller, 0, proved.segments, proved.info.tensors,
                                              /*upload=*/false));
  Component entry;
  entry.info = proved.info;
  entry.info.component_id = ComponentId(cache_key, structure_hash);
  entry.info.cache_key = cache_key;
  if (entry.info.content_hash.empty()) entry.info.content_hash = content_hash;
  entry.info.sessions = 0;
  entry.info.last_used = Now();
  entry.info.keep_alive = absl::ZeroDuration();
  entry.info.uploader_pid = lease.client_pid;
  entry.info.owner_uid = caller.uid;
  entry.segments = proved.segments;  // refcounted: either entry may go first
  entry.sources = sources;
  entry.proof_digest = proof_digest;
  Logger("store")->info("'{}' of {} shares the copy of '{}': its files hold the same bytes ({})",
                        EscapeForDisplay(cache_key), caller.Describe(),
                        EscapeForDisplay(target_key), content_hash);
  auto [it, inserted] = components_.emplace(KeyOf(caller.uid, cache_key), std::move(entry));
  PersistLocked();
  return SnapshotLocked(it->second);
}

}  // namespace ddo
