// File: daemon/stream/pool_prefetcher.cc
#include "daemon/stream/pool_prefetcher.h"

#include <utility>

#include "daemon/common/format_bytes.h"
#include "daemon/common/logging.h"
#include "ddo/wire/display_text.h"

namespace ddo {
namespace {

BackgroundQueue::KeyMatch JobsOf(const std::string& lease_id) {
  return [lease_id](const std::string& key) { return key == lease_id; };
}

}  // namespace

PoolPrefetcher::PoolPrefetcher(ComponentStore& store) : store_(store) {}

PoolPrefetcher::~PoolPrefetcher() { Stop(); }

void PoolPrefetcher::Start(const std::string& lease_id, const Caller& caller,
                           std::vector<std::string> keys) {
  jobs_.Cancel(JobsOf(lease_id));
  if (keys.empty()) return;
  jobs_.Enqueue(lease_id, [this, caller, keys = std::move(keys)](
                              const std::function<bool()>& cancelled) {
    Promote(caller, keys, cancelled);
  });
}

void PoolPrefetcher::CancelLease(const std::string& lease_id) { jobs_.Cancel(JobsOf(lease_id)); }

void PoolPrefetcher::CancelLeaseAndWait(const std::string& lease_id) {
  jobs_.CancelAndWait(JobsOf(lease_id));
}

void PoolPrefetcher::Stop() { jobs_.Stop(); }

void PoolPrefetcher::WaitIdle() { jobs_.WaitIdle(); }

void PoolPrefetcher::Promote(const Caller& caller, const std::vector<std::string>& keys,
                             const std::function<bool()>& cancelled) {
  auto log = Logger("stream");
  for (const std::string& key : keys) {
    if (cancelled()) return;
    absl::StatusOr<uint64_t> moved = store_.Promote(key, caller, cancelled);
    if (moved.ok()) {
      if (*moved > 0) {
        log->info("phase prefetch: '{}' of {}: {} read back into the pool",
                  EscapeForDisplay(key), caller.Describe(), FormatBytes(*moved));
      }
    } else {
      log->info("phase prefetch: '{}' of {} stays in its files: {}", EscapeForDisplay(key),
                caller.Describe(), moved.status().message());
    }
  }
}

}  // namespace ddo
