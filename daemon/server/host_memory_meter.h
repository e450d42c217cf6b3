// File: daemon/server/host_memory_meter.h
//
// Measures what the RAM budget bounds beyond the pool (docs/configuration.md, "What the RAM
// budget bounds"), a few times a second, and tells the pool (HostPool::SetOutsideBytes):
//   - ddod's own private memory, less its holds (staging buffers, host sessions), which the
//     pool counts already;
//   - the private memory of every process that holds a lease, once per process, less the
//     client uploads it is sending: their bytes are in the pool already, and the runner's own
//     copy usually goes once its weights view the pool's.
// When the budget was derived from the available RAM (no --ram-budget-gb), a runner that was
// running before ddod measured it is counted only for what it holds beyond its first sample:
// the rest was outside "available" already.
//
// Thread-safety: MeasureOnce may be called from any thread; Start runs it on a thread of its
// own until Stop or destruction.
#ifndef DDO_DAEMON_SERVER_HOST_MEMORY_METER_H_
#define DDO_DAEMON_SERVER_HOST_MEMORY_METER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/platform/process_footprint.h"
#include "daemon/pool/host_pool.h"

namespace ddo {

// Where the meter reads. The defaults of HostMemoryMeter::ForDaemon read the OS; tests give
// their own.
struct MeterSources {
  // The processes that hold leases now (each may appear more than once).
  std::function<std::vector<int64_t>()> runner_pids;
  // ComponentStore::UploadingBytesByPid.
  std::function<std::map<int64_t, uint64_t>()> uploading_bytes;
  std::function<absl::StatusOr<ProcessFootprint>(int64_t pid)> read_process;
  std::function<absl::StatusOr<ProcessFootprint>()> read_own;
};

struct MeterOptions {
  // The budget was derived from the RAM available at start (see the file comment).
  bool derived_budget = false;
  absl::Duration period = absl::Milliseconds(250);
};

class HostMemoryMeter {
 public:
  HostMemoryMeter(HostPool& pool, MeterSources sources, MeterOptions options);
  HostMemoryMeter(const HostMemoryMeter&) = delete;
  HostMemoryMeter& operator=(const HostMemoryMeter&) = delete;
  ~HostMemoryMeter();

  // Measures every `period` on a thread of its own.
  void Start();
  void Stop();

  // Measures now, tells the pool, and returns what it counted outside the pool.
  uint64_t MeasureOnce();

 private:
  // What one runner counts for now (its baseline kept or set); mu_ held.
  uint64_t RunnerBytesLocked(int64_t pid, const ProcessFootprint& footprint, uint64_t own_start)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Logs, once per process, that it cannot be read (it is then counted as nothing); mu_ held.
  void NoteUnreadableLocked(int64_t pid, const absl::Status& status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  HostPool& pool_;
  const MeterSources sources_;
  const MeterOptions options_;
  absl::Mutex mu_;
  // Derived budgets: what each runner older than ddod held at its first sample.
  std::map<int64_t, uint64_t> baselines_ ABSL_GUARDED_BY(mu_);
  std::set<int64_t> unreadable_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace ddo

#endif  // DDO_DAEMON_SERVER_HOST_MEMORY_METER_H_
