#include "daemon/service/calls_per_user.h"

#include "absl/strings/str_cat.h"

namespace ddo {

absl::Status CallsPerUser::Enter(uid_t uid, bool bounded) {
  absl::MutexLock lock(&mu_);
  size_t& running = running_[uid];
  if (bounded && running >= limit_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "uid ", uid, " already has ", running, " calls running, the limit per user (", limit_,
        "); wait for them to finish"));
  }
  ++running;
  return absl::OkStatus();
}

void CallsPerUser::Leave(uid_t uid) {
  absl::MutexLock lock(&mu_);
  auto it = running_.find(uid);
  if (it == running_.end()) return;
  if (--it->second == 0) running_.erase(it);
}

size_t CallsPerUser::running(uid_t uid) const {
  absl::MutexLock lock(&mu_);
  auto it = running_.find(uid);
  return it == running_.end() ? 0 : it->second;
}

}  // namespace ddo
