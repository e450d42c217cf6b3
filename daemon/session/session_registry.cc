// File: daemon/session/session_registry.cc
#include "daemon/session/session_registry.h"

#include "absl/strings/str_cat.h"
#include "daemon/common/random_id.h"
#include "ddo/wire/display_text.h"

namespace ddo {

absl::StatusOr<std::string> SessionRegistry::Add(const Lease& lease, const std::string& cache_key) {
  absl::MutexLock lock(&mu_);
  size_t& held = per_uid_[lease.caller.uid];
  if (!lease.caller.admin && held >= max_per_uid_) {
    return absl::ResourceExhaustedError(absl::StrCat("uid ", lease.caller.uid, " already holds ",
                                                     held, " sessions, the limit per user (",
                                                     max_per_uid_, ")"));
  }
  std::string id = RandomId();
  sessions_[id] = SessionRecord{id, lease.id, cache_key, lease.caller.uid, ""};
  ++held;
  return id;
}

absl::StatusOr<SessionRecord> SessionRegistry::FindFor(const std::string& id,
                                                       const Caller& caller) const {
  absl::MutexLock lock(&mu_);
  auto it = sessions_.find(id);
  if (it == sessions_.end()) {
    return absl::NotFoundError(absl::StrCat("no session ", EscapeForDisplay(id, 8), "..."));
  }
  if (it->second.uid != caller.uid && !caller.admin) {
    return absl::PermissionDeniedError("that session belongs to another user");
  }
  return it->second;
}

absl::Status SessionRegistry::MarkStreaming(const std::string& id, const std::string& device) {
  absl::MutexLock lock(&mu_);
  auto it = sessions_.find(id);
  if (it == sessions_.end()) {
    return absl::NotFoundError(absl::StrCat("no session ", EscapeForDisplay(id, 8), "..."));
  }
  it->second.device = device;
  return absl::OkStatus();
}

std::optional<SessionRecord> SessionRegistry::Remove(const std::string& id) {
  absl::MutexLock lock(&mu_);
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return std::nullopt;
  SessionRecord record = std::move(it->second);
  sessions_.erase(it);
  if (--per_uid_[record.uid] == 0) per_uid_.erase(record.uid);
  return record;
}

std::vector<SessionRecord> SessionRegistry::RemoveLease(const std::string& lease_id) {
  absl::MutexLock lock(&mu_);
  std::vector<SessionRecord> removed;
  for (auto it = sessions_.begin(); it != sessions_.end();) {
    if (it->second.lease_id != lease_id) {
      ++it;
      continue;
    }
    if (--per_uid_[it->second.uid] == 0) per_uid_.erase(it->second.uid);
    removed.push_back(std::move(it->second));
    it = sessions_.erase(it);
  }
  return removed;
}

std::vector<SessionRecord> SessionRegistry::List() const {
  absl::MutexLock lock(&mu_);
  std::vector<SessionRecord> all;
  all.reserve(sessions_.size());
  for (const auto& [id, record] : sessions_) all.push_back(record);
  return all;
}

size_t SessionRegistry::size() const {
  absl::MutexLock lock(&mu_);
  return sessions_.size();
}

}  // namespace ddo
