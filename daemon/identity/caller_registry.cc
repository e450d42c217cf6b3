#include "daemon/identity/caller_registry.h"

#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "daemon/common/random_id.h"

namespace ddo {
namespace {

absl::Status UnknownToken() {
  return absl::UnauthenticatedError(
      "unknown or expired ddo-token: connect to ddod's identity socket and send HELLO "
      "(docs/security.md)");
}

}  // namespace

std::string CallerRegistry::Add(const Caller& caller) {
  std::string token = RandomId();
  absl::MutexLock lock(&mu_);
  entries_[token].caller = caller;
  return token;
}

void CallerRegistry::Remove(const std::string& token) {
  Entry removed;  // its descriptors close after the lock is released
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(token);
  if (it == entries_.end()) return;
  removed = std::move(it->second);
  entries_.erase(it);
}

absl::StatusOr<Caller> CallerRegistry::Find(const std::string& token) const {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(token);
  if (it == entries_.end()) return UnknownToken();
  return it->second.caller;
}

absl::StatusOr<uint64_t> CallerRegistry::AddFile(const std::string& token, PassedFile file) {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(token);
  if (it == entries_.end()) return UnknownToken();
  Entry& entry = it->second;
  size_t of_uid = 0;
  size_t in_all = 0;
  for (const auto& [other_token, other] : entries_) {
    in_all += other.files.size();
    if (other.caller.uid == entry.caller.uid) of_uid += other.files.size();
  }
  const char* limit = entry.files.size() >= kMaxHeldFiles ? "per connection"
                      : of_uid >= kMaxHeldFilesPerUid     ? "per user"
                      : in_all >= kMaxHeldFilesInAll      ? "in all"
                                                          : nullptr;
  if (limit != nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "too many passed files not yet used by a request (limit ", limit, ": ",
        kMaxHeldFiles, " per connection, ", kMaxHeldFilesPerUid, " per user, ",
        kMaxHeldFilesInAll, " in all)"));
  }
  const uint64_t handle = entry.next_handle++;
  entry.files.emplace(handle, std::move(file));
  return handle;
}

absl::StatusOr<std::vector<PassedFile>> CallerRegistry::TakeFiles(
    const std::string& token, const std::vector<uint64_t>& handles) {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(token);
  if (it == entries_.end()) return UnknownToken();
  Entry& entry = it->second;
  for (size_t i = 0; i < handles.size(); ++i) {
    if (entry.files.count(handles[i]) == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "file handle ", handles[i],
          " is not one this connection passed (or it was used already): pass the file again"));
    }
    for (size_t j = 0; j < i; ++j) {
      if (handles[j] == handles[i]) {
        return absl::InvalidArgumentError(
            absl::StrCat("file handle ", handles[i], " is named twice"));
      }
    }
  }
  std::vector<PassedFile> files;
  files.reserve(handles.size());
  for (uint64_t handle : handles) {
    auto file = entry.files.find(handle);
    files.push_back(std::move(file->second));
    entry.files.erase(file);
  }
  return files;
}

void CallerRegistry::Grant(const std::string& token, const std::string& shm_name,
                           bool writable) {
  Grant(token, SegmentGrant{shm_name, writable});
}

void CallerRegistry::Grant(const std::string& token, const SegmentGrant& grant) {
  const bool is_file = grant.kind == SegmentKind::kFile;
  if (grant.kind != SegmentKind::kShm && grant.file == nullptr) return;
  std::shared_ptr<const UniqueFd> replaced;  // closes after the lock is released
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(token);
  if (it == entries_.end()) return;
  auto& grants = it->second.grants;
  if (grants.size() >= kMaxGrants && grants.count(grant.shm_name) == 0) {
    // Bounded memory for a client that attaches forever: an arbitrary old grant goes.
    replaced = std::move(grants.begin()->second.file);
    grants.erase(grants.begin());
  }
  auto [slot, fresh] = grants.try_emplace(grant.shm_name);
  SegmentGrant& granted = slot->second;
  const bool widens = !fresh && !is_file && granted.kind == SegmentKind::kShm && granted.writable;
  if (granted.file != nullptr) replaced = std::move(granted.file);
  granted = grant;
  granted.writable =
      grant.kind == SegmentKind::kPipe || (!is_file && (grant.writable || widens));
}

void CallerRegistry::Grant(const std::string& token, const std::vector<SegmentGrant>& grants) {
  for (const SegmentGrant& grant : grants) Grant(token, grant);
}

absl::StatusOr<const SegmentGrant*> CallerRegistry::FindGrantLocked(const std::string& token,
                                                                    const std::string& shm_name,
                                                                    bool writable) const {
  auto it = entries_.find(token);
  if (it == entries_.end()) return UnknownToken();
  auto grant = it->second.grants.find(shm_name);
  if (grant == it->second.grants.end()) {
    return absl::FailedPreconditionError(
        "that segment was not granted to this connection: attach, upload or stream first, "
        "with this connection's token");
  }
  if (writable && !grant->second.writable) {
    return absl::PermissionDeniedError("that segment was granted read-only");
  }
  return &grant->second;
}

absl::StatusOr<SegmentGrant> CallerRegistry::FindGrant(const std::string& token,
                                                       const std::string& shm_name,
                                                       bool writable) const {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<const SegmentGrant*> grant = FindGrantLocked(token, shm_name, writable);
  if (!grant.ok()) return grant.status();
  return **grant;
}

absl::StatusOr<SegmentGrant> CallerRegistry::ServeGrant(const std::string& token,
                                                        const std::string& shm_name,
                                                        bool writable) {
  std::optional<SegmentGrant> taken;  // its descriptor closes after the lock is released
  absl::MutexLock lock(&mu_);
  absl::StatusOr<const SegmentGrant*> grant = FindGrantLocked(token, shm_name, writable);
  if (!grant.ok()) return grant.status();
  if ((*grant)->kind != SegmentKind::kPipe) return **grant;
  if (!writable) {
    return absl::PermissionDeniedError("an upload stream is a pipe's write end: OPEN it rw");
  }
  taken = **grant;
  entries_.find(token)->second.grants.erase(shm_name);
  return *std::move(taken);
}

absl::Status CallerRegistry::CheckGrant(const std::string& token, const std::string& shm_name,
                                        bool writable) const {
  return FindGrant(token, shm_name, writable).status();
}

size_t CallerRegistry::size() const {
  absl::MutexLock lock(&mu_);
  return entries_.size();
}

}  // namespace ddo
