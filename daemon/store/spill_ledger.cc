// File: daemon/store/spill_ledger.cc
#include "daemon/store/spill_ledger.h"

#include "absl/strings/str_cat.h"
#include "daemon/common/format_bytes.h"

namespace ddo {

SpillLedger::SpillLedger(uint64_t budget, uint64_t per_uid)
    : budget_(budget), per_uid_(per_uid == 0 ? budget : per_uid) {}

absl::StatusOr<std::shared_ptr<SpillLedger::Charge>> SpillLedger::Take(uid_t uid,
                                                                       uint64_t bytes) {
  absl::MutexLock lock(&mu_);
  uint64_t& own = by_uid_[uid];
  if (own + bytes > per_uid_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "uid ", uid, " has ", FormatBytes(own), " spilled; ", FormatBytes(bytes),
        " more would pass the limit per user (", FormatBytes(per_uid_), ")"));
  }
  if (used_ + bytes > budget_) {
    return absl::ResourceExhaustedError(
        absl::StrCat("ddod has ", FormatBytes(used_), " spilled; ", FormatBytes(bytes),
                     " more would pass its spill budget (", FormatBytes(budget_), ")"));
  }
  own += bytes;
  used_ += bytes;
  return std::make_shared<Charge>(this, uid, bytes);
}

void SpillLedger::Return(uid_t uid, uint64_t bytes) {
  absl::MutexLock lock(&mu_);
  auto it = by_uid_.find(uid);
  if (it != by_uid_.end()) {
    it->second -= std::min(it->second, bytes);
    if (it->second == 0) by_uid_.erase(it);
  }
  used_ -= std::min(used_, bytes);
}

}  // namespace ddo
