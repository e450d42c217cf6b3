// File: daemon/store/component_store_eviction.cc
//
// ComponentStore's eviction: making room for a new component (least recently used first),
// evictions a caller asks for, keep-alives and the idle eviction they set. Every function
// here runs under the store's mu_ (the ...Locked ones are called with it held).
#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "daemon/common/format_bytes.h"
#include "daemon/common/logging.h"
#include "daemon/common/status_macros.h"
#include "daemon/store/component_store.h"
#include "ddo/wire/display_text.h"

namespace ddo {

uint64_t ComponentStore::ReleasableBytesLocked(const Component& component) const {
  uint64_t bytes = 0;
  for (const auto& segment : component.segments) {
    if (segment == nullptr) continue;
    bool shared = false;
    for (const auto& [key, other] : components_) {
      if (&other == &component) continue;
      shared = shared || std::find(other.segments.begin(), other.segments.end(), segment) !=
                             other.segments.end();
    }
    if (!shared) bytes += segment->size();
  }
  return bytes;
}

absl::Status ComponentStore::MakeRoomLocked(const std::string& for_key, uint64_t bytes,
                                            const std::set<std::string>& spared) {
  auto log = Logger("store");
  // The caller's name for it, without the uid the map's key starts with.
  const std::string shown_key = for_key.substr(for_key.find(':') + 1);
  if (const PoolUsage usage = pool_.Usage(); HostPool::Footprint(bytes) > usage.room_bytes()) {
    // Evicting would empty the cache for nothing.
    const std::string room =
        usage.outside_bytes == 0
            ? absl::StrCat("the whole budget of ", FormatBytes(usage.budget_bytes))
            : absl::StrCat("the ", FormatBytes(usage.room_bytes()), " that the budget of ",
                           FormatBytes(usage.budget_bytes), " leaves beside the ",
                           FormatBytes(usage.outside_bytes),
                           " that ddod and its runners hold outside the pool");
    return absl::ResourceExhaustedError(absl::StrCat(
        "component '", EscapeForDisplay(shown_key), "' needs ",
        FormatBytes(HostPool::Footprint(bytes)), " of host pool, more than ", room,
        "; raise --ram-budget-gb"));
  }
  // Each round evicts one component that releases bytes (its segments no other component
  // uses): a base whose bytes a derived version shares releases nothing until that one goes,
  // so it waits for it. Every round removes a component, so the loop ends.
  // A component with backing files is demoted to them (it stays READY, streamed from its
  // files) before any is discarded; within each kind, least recently used first.
  bool demoted_any = false;
  while (!pool_.Fits(bytes)) {
    auto victim = components_.end();
    uint64_t victim_releases = 0;
    bool victim_demotable = false;
    for (auto it = components_.begin(); it != components_.end(); ++it) {
      const ComponentSnapshot& info = it->second.info;
      if (info.state != ComponentState::kReady || info.sessions > 0 || it->first == for_key ||
          spared.count(it->first) != 0) {
        continue;
      }
      const bool demotable = DemotableLocked(it->second);
      if (victim != components_.end() &&
          (demotable < victim_demotable ||
           (demotable == victim_demotable && info.last_used >= victim->second.info.last_used))) {
        continue;
      }
      const uint64_t releases = ReleasableBytesLocked(it->second);
      if (releases == 0) continue;
      victim = it;
      victim_releases = releases;
      victim_demotable = demotable;
    }
    if (victim != components_.end() && victim_demotable) {
      DemoteLocked(victim);
      demoted_any = true;
      continue;
    }
    if (victim == components_.end()) {
      if (demoted_any) PersistLocked();
      const PoolUsage usage = pool_.Usage();
      return absl::ResourceExhaustedError(absl::StrCat(
          "component '", EscapeForDisplay(shown_key), "' needs ", FormatBytes(HostPool::Footprint(bytes)),
          " of host pool, but the budget is ", FormatBytes(usage.budget_bytes), " and ",
          FormatBytes(usage.reserved_bytes),
          " is held by components in use or being uploaded (nothing left to evict); raise "
          "--ram-budget-gb or detach other runners"));
    }
    log->info("evicting '{}' of uid {} ({} released, unused since {}) to make room for '{}'",
              EscapeForDisplay(victim->second.info.cache_key), victim->second.info.owner_uid, FormatBytes(victim_releases),
              absl::FormatTime("%H:%M:%S", victim->second.info.last_used, absl::LocalTimeZone()),
              EscapeForDisplay(shown_key));
    DiscardLocked(victim);
    ++evictions_;
  }
  if (demoted_any) PersistLocked();
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> ComponentStore::Evict(const std::string& cache_key,
                                               const Caller& caller, std::optional<uid_t> owner) {
  absl::MutexLock lock(&mu_);
  DDO_ASSIGN_OR_RETURN(auto it, FindOwnedLocked(cache_key, caller, owner));
  if (it->second.info.state == ComponentState::kUploading) {
    return absl::FailedPreconditionError(
        absl::StrCat("'", EscapeForDisplay(cache_key), "' is being uploaded"));
  }
  if (it->second.info.sessions > 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "'", cache_key, "' is in use by ", it->second.info.sessions, " session(s)"));
  }
  const uint64_t freed = DiscardLocked(it);
  Logger("store")->info("evicted '{}' at the request of {} ({} released)",
                        EscapeForDisplay(cache_key), caller.Describe(), FormatBytes(freed));
  PersistLocked();
  return freed;
}

absl::Status ComponentStore::SetKeepAlive(const std::string& cache_key, const Caller& caller,
                                          absl::Duration keep_alive) {
  absl::MutexLock lock(&mu_);
  DDO_ASSIGN_OR_RETURN(auto it, FindOwnedLocked(cache_key, caller));
  if (it->second.info.state != ComponentState::kReady) {
    return absl::NotFoundError(
        absl::StrCat("no component '", EscapeForDisplay(cache_key), "' in the pool"));
  }
  it->second.info.keep_alive = keep_alive;
  PersistLocked();  // a restarted ddod keeps it
  return absl::OkStatus();
}

std::vector<std::string> ComponentStore::EvictIdle(absl::Time now, absl::Duration fallback) {
  std::vector<std::string> evicted;
  absl::MutexLock lock(&mu_);
  // Rounds until none is due: a base whose bytes a derived version shares is due only after
  // that one went (it releases nothing before).
  for (bool again = true; again;) {
    again = false;
    for (auto it = components_.begin(); it != components_.end(); ++it) {
      const ComponentSnapshot& info = it->second.info;
      const absl::Duration keep =
          info.keep_alive == absl::ZeroDuration() ? fallback : info.keep_alive;
      if (info.state != ComponentState::kReady || info.sessions > 0 ||
          keep == absl::InfiniteDuration() || keep <= absl::ZeroDuration() ||
          now - info.last_used < keep ||
          // A base a derived version shares waits for it; a component on the file tier
          // (demoted, or loaded there) releases descriptors, not pool bytes, and goes too.
          (ReleasableBytesLocked(it->second) == 0 && it->second.files == nullptr)) {
        continue;
      }
      const std::string key = info.cache_key;  // the owner's name for it
      const absl::Duration unused = now - info.last_used;
      const uint64_t freed = DiscardLocked(it);  // `info` is gone from here on
      ++evictions_;
      Logger("store")->info("evicted '{}' after {} unused (keep-alive {}; {} released)",
                            EscapeForDisplay(key), absl::FormatDuration(unused),
                            absl::FormatDuration(keep), FormatBytes(freed));
      evicted.push_back(key);
      again = true;
      break;  // the map changed
    }
  }
  if (!evicted.empty()) PersistLocked();
  return evicted;
}

}  // namespace ddo
