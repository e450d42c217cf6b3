#include "daemon/server/host_memory_meter.h"

#include <algorithm>
#include <utility>

#include "daemon/common/format_bytes.h"
#include "daemon/common/logging.h"

namespace ddo {

HostMemoryMeter::HostMemoryMeter(HostPool& pool, MeterSources sources, MeterOptions options)
    : pool_(pool), sources_(std::move(sources)), options_(options) {}

HostMemoryMeter::~HostMemoryMeter() { Stop(); }

void HostMemoryMeter::Start() {
  thread_ = std::thread([this] {
    for (;;) {
      MeasureOnce();
      absl::MutexLock lock(&mu_);
      if (mu_.AwaitWithTimeout(absl::Condition(&stop_), options_.period)) return;
    }
  });
}

void HostMemoryMeter::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

uint64_t HostMemoryMeter::MeasureOnce() {
  std::vector<int64_t> pids = sources_.runner_pids();
  std::sort(pids.begin(), pids.end());
  pids.erase(std::unique(pids.begin(), pids.end()), pids.end());
  const std::map<int64_t, uint64_t> uploading = sources_.uploading_bytes();
  const absl::StatusOr<ProcessFootprint> own = sources_.read_own();

  absl::MutexLock lock(&mu_);
  uint64_t outside = 0;
  if (own.ok()) {
    // The holds are anonymous memory of ddod's that the pool counts already.
    outside += own->private_bytes - std::min(own->private_bytes, pool_.Usage().held_bytes);
  }
  for (int64_t pid : pids) {
    const absl::StatusOr<ProcessFootprint> footprint = sources_.read_process(pid);
    if (!footprint.ok()) {
      NoteUnreadableLocked(pid, footprint.status());
      continue;
    }
    uint64_t bytes = RunnerBytesLocked(pid, *footprint, own.ok() ? own->started : 0);
    if (auto sending = uploading.find(pid); sending != uploading.end()) {
      bytes -= std::min(bytes, sending->second);
    }
    outside += bytes;
  }
  // Processes whose leases ended are forgotten (a new process may get the pid).
  for (auto it = baselines_.begin(); it != baselines_.end();) {
    it = std::binary_search(pids.begin(), pids.end(), it->first) ? std::next(it)
                                                                   : baselines_.erase(it);
  }
  for (auto it = unreadable_.begin(); it != unreadable_.end();) {
    it = std::binary_search(pids.begin(), pids.end(), *it) ? std::next(it) : unreadable_.erase(it);
  }
  pool_.SetOutsideBytes(outside);
  return outside;
}

uint64_t HostMemoryMeter::RunnerBytesLocked(int64_t pid, const ProcessFootprint& footprint,
                                            uint64_t own_start) {
  if (!options_.derived_budget || footprint.started > own_start) return footprint.private_bytes;
  const uint64_t baseline = baselines_.emplace(pid, footprint.private_bytes).first->second;
  return footprint.private_bytes - std::min(footprint.private_bytes, baseline);
}

void HostMemoryMeter::NoteUnreadableLocked(int64_t pid, const absl::Status& status) {
  if (!unreadable_.insert(pid).second || absl::IsNotFound(status)) return;  // gone: no news
  Logger("pool")->info(
      "the RAM budget cannot count runner pid {}: {} (its memory is not counted)", pid,
      status.message());
}

}  // namespace ddo
