#include "daemon/common/connection_table.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace ddo {

ConnectionTable::ConnectionTable(std::string what, ConnectionLimits limits,
                                 StillOpen still_open, Clock clock)
    : what_(std::move(what)),
      limits_(limits),
      still_open_(std::move(still_open)),
      clock_(clock != nullptr ? std::move(clock) : Clock([] { return absl::Now(); })) {}

absl::Status ConnectionTable::Admit(int fd, ino_t inode, uid_t uid, bool admin) {
  if (auto it = connections_.find(fd); it != connections_.end()) Erase(it);
  absl::Status allowed = Check(uid, admin);
  if (!allowed.ok() && still_open_ != nullptr) {
    // Only now, and not again soon: sweeping asks about every connection, under the limits
    // nobody needs it, and a refused caller must not make each refusal that costly.
    if (const absl::Time now = clock_(); now >= next_sweep_) {
      next_sweep_ = now + kSweepInterval;
      Sweep();
      allowed = Check(uid, admin);
    }
  }
  if (!allowed.ok()) return allowed;
  connections_.emplace(fd, Entry{inode, uid});
  ++per_uid_[uid];
  return absl::OkStatus();
}

absl::Status ConnectionTable::Check(uid_t uid, bool admin) const {
  const size_t held = CountOf(uid);
  if (held >= limits_.per_uid) {
    return absl::ResourceExhaustedError(absl::StrCat("uid ", uid, " already holds ", held,
                                                     " connections to the ", what_,
                                                     ", the limit per user"));
  }
  if (!admin && connections_.size() >= limits_.in_all) {
    return absl::ResourceExhaustedError(absl::StrCat("the ", what_, " already has ",
                                                     connections_.size(),
                                                     " connections, the limit in all"));
  }
  return absl::OkStatus();
}

void ConnectionTable::Release(int fd) {
  if (auto it = connections_.find(fd); it != connections_.end()) Erase(it);
}

void ConnectionTable::Sweep() {
  if (still_open_ == nullptr) return;
  for (auto it = connections_.begin(); it != connections_.end();) {
    if (still_open_(it->first, it->second.inode)) {
      ++it;
    } else {
      auto gone = it++;
      Erase(gone);
    }
  }
}

size_t ConnectionTable::CountOf(uid_t uid) const {
  auto it = per_uid_.find(uid);
  return it == per_uid_.end() ? 0 : it->second;
}

void ConnectionTable::Erase(std::map<int, Entry>::iterator it) {
  auto count = per_uid_.find(it->second.uid);
  if (count != per_uid_.end() && --count->second == 0) per_uid_.erase(count);
  connections_.erase(it);
}

}  // namespace ddo
