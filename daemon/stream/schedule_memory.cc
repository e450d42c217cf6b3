// File: daemon/stream/schedule_memory.cc
#include "daemon/stream/schedule_memory.h"

#include "absl/strings/str_cat.h"

namespace ddo {
namespace {

std::string OwnedKey(uid_t uid, const std::string& key) { return absl::StrCat(uid, ":", key); }

}  // namespace

KnownSchedule ScheduleMemory::Known(const ComponentName& component,
                                    const std::string& signature) const {
  absl::MutexLock lock(&mu_);
  const std::string own =
      absl::StrCat(OwnedKey(component.owner_uid, component.cache_key), "/", signature);
  if (auto it = schedules_.find(own); it != schedules_.end()) return {it->second, false};
  if (!component.base_cache_key.empty()) {
    const std::string base =
        absl::StrCat(OwnedKey(component.owner_uid, component.base_cache_key), "/", signature);
    if (auto it = schedules_.find(base); it != schedules_.end()) return {it->second, true};
  }
  return {};
}

void ScheduleMemory::RememberSchedule(const ComponentName& component,
                                      const std::string& signature,
                                      std::vector<uint32_t> order) {
  absl::MutexLock lock(&mu_);
  schedules_[absl::StrCat(OwnedKey(component.owner_uid, component.cache_key), "/", signature)] =
      std::move(order);
}

WeightRows ScheduleMemory::LearnedRows(const ComponentName& component) const {
  absl::MutexLock lock(&mu_);
  for (const std::string* key : {&component.cache_key, &component.base_cache_key}) {
    if (key->empty()) continue;
    if (auto it = rows_.find(OwnedKey(component.owner_uid, *key)); it != rows_.end()) {
      return it->second;
    }
  }
  return {};
}

void ScheduleMemory::RememberRows(const ComponentName& component,
                                  const std::vector<TensorEntry>& tensors,
                                  const WeightRows& rows) {
  WeightRows kept;
  for (const TensorEntry& tensor : tensors) {
    if (auto it = rows.find(tensor.name); it != rows.end()) kept.emplace(tensor.name, it->second);
  }
  if (kept.empty()) return;
  absl::MutexLock lock(&mu_);
  rows_[OwnedKey(component.owner_uid, component.cache_key)] = std::move(kept);
}

}  // namespace ddo
