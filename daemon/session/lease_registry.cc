#include "daemon/session/lease_registry.h"

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "daemon/common/logging.h"
#include "daemon/common/random_id.h"
#include "ddo/wire/display_text.h"

namespace ddo {
namespace {

// Client names are the client's words: shown escaped and at most this long.
constexpr size_t kMaxShownClientName = 128;

}  // namespace

absl::StatusOr<Lease> LeaseRegistry::Open(const Caller& caller, std::string client_name) {
  Lease lease{RandomId(), caller.pid, EscapeForDisplay(client_name, kMaxShownClientName),
              absl::Now(), caller};
  {
    absl::MutexLock lock(&mu_);
    if (shutting_down_) {
      return absl::UnavailableError("ddod is shutting down");
    }
    size_t of_uid = 0;
    for (const auto& [id, open] : leases_) of_uid += open.caller.uid == caller.uid ? 1 : 0;
    if (!caller.admin && of_uid >= limits_.per_uid) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "uid ", caller.uid, " already holds ", of_uid, " leases, the limit per user (",
          limits_.per_uid, "); close other clients first"));
    }
    if (leases_.size() >= limits_.in_all) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "ddod holds ", leases_.size(), " leases, its limit in all (", limits_.in_all, ")"));
    }
    leases_.emplace(lease.id, lease);
  }
  Logger("lease")->info("lease {} opened by {} ({})", lease.id.substr(0, 8), caller.Describe(),
                        lease.client_name);
  return lease;
}

absl::StatusOr<Lease> LeaseRegistry::FindFor(const std::string& id, const Caller& caller) const {
  absl::StatusOr<Lease> lease = Find(id);
  if (lease.ok() && lease->caller.uid != caller.uid) {
    return absl::PermissionDeniedError(
        absl::StrCat("lease ", id.substr(0, 8), "... belongs to another user"));
  }
  return lease;
}

absl::StatusOr<Lease> LeaseRegistry::Find(const std::string& id) const {
  absl::MutexLock lock(&mu_);
  auto it = leases_.find(id);
  if (it == leases_.end()) {
    return absl::FailedPreconditionError(
        id.empty() ? std::string("lease_id is empty: open a lease with Connect first")
                   : absl::StrCat("no open lease ", id.substr(0, 8),
                                  "...: it ended, or was never granted (Connect first)"));
  }
  return it->second;
}

void LeaseRegistry::Close(const std::string& id) {
  Lease closed;
  {
    absl::MutexLock lock(&mu_);
    auto it = leases_.find(id);
    if (it == leases_.end()) {
      return;
    }
    closed = std::move(it->second);
    leases_.erase(it);
  }
  Logger("lease")->info("lease {} of {} closed after {:.1f} s", id.substr(0, 8),
                        closed.caller.Describe(), absl::ToDoubleSeconds(absl::Now() - closed.connected));
}

bool LeaseRegistry::WaitForShutdown(absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  return mu_.AwaitWithTimeout(absl::Condition(&shutting_down_), timeout);
}

void LeaseRegistry::BeginShutdown(const std::string& reason) {
  absl::MutexLock lock(&mu_);
  shutting_down_ = true;
  shutdown_reason_ = reason;
}

std::string LeaseRegistry::shutdown_reason() const {
  absl::MutexLock lock(&mu_);
  return shutdown_reason_;
}

bool LeaseRegistry::shutting_down() const {
  absl::MutexLock lock(&mu_);
  return shutting_down_;
}

std::vector<Lease> LeaseRegistry::List() const {
  absl::MutexLock lock(&mu_);
  std::vector<Lease> result;
  result.reserve(leases_.size());
  for (const auto& [id, lease] : leases_) {
    result.push_back(lease);
  }
  return result;
}

size_t LeaseRegistry::size() const {
  absl::MutexLock lock(&mu_);
  return leases_.size();
}

}  // namespace ddo
