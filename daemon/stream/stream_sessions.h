// File: daemon/stream/stream_sessions.h
//
// Every streaming session of this ddod, and the one place that opens and closes them: opening
// a plan that policy decided (room on the device, device memory, control block, slab fill),
// schedules (and the schedule remembered per component and plan for the next runner: a
// ScheduleMemory), closing by Detach, by the end of a lease or at shutdown. What sessions share
// per device (ddod's budget, the copy worker, warm slabs) is the DeviceTable's; a pipeline
// phase is the PhasePrefetcher's.
//
// Thread-safety: all methods may be called from any thread; mu_ guards the open sessions and
// the totals, and is held around no call into the device table but FindWorker (a leaf lock).
// Slow work (allocating device memory, filling the slab, draining) runs outside it.
#ifndef DDO_DAEMON_STREAM_STREAM_SESSIONS_H_
#define DDO_DAEMON_STREAM_STREAM_SESSIONS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "daemon/platform/gpu_inventory.h"
#include "daemon/pool/host_pool.h"
#include "daemon/session/lease_registry.h"
#include "daemon/session/session_registry.h"
#include "daemon/store/component_store.h"
#include "daemon/stream/device_budget.h"
#include "daemon/stream/device_export.h"
#include "daemon/stream/device_table.h"
#include "daemon/stream/phase_prefetcher.h"
#include "daemon/stream/schedule_memory.h"
#include "daemon/layout/session_plan.h"
#include "daemon/stream/stream_session.h"
#include "daemon/stream/stream_worker.h"

namespace ddo {

// The options are all per device.
using StreamSessionsOptions = DeviceTableOptions;

// An open session as its runner needs it (docs/streaming.md): the service sends it as the
// AttachResponse.
struct OpenedStream {
  ComponentSnapshot component;
  std::string session_id;
  std::string device;  // "cpu", "cpu:<n>" or the GPU UUID
  DeviceExport memory;
  SessionPlan plan;    // as placed: units, resident tensors, ring, decisions
  std::string control_block_shm;
  uint64_t control_block_bytes = 0;
  std::string doorbell_shm;
  std::vector<uint32_t> schedule;  // the one learned before for this component and plan
};

struct StreamSessionInfo {
  std::string session_id;
  std::string lease_id;
  std::string cache_key;
  std::string device;
  StreamSessionStats stats;
  uint32_t ring_slots = 0;
  uint64_t resident_bytes = 0;
  uint64_t device_bytes = 0;
};

// Streaming since start, over every session (closed ones included): GetStats and metrics.
struct StreamTotals {
  uint64_t sessions_opened = 0;
  uint64_t streamed_bytes = 0;
  uint64_t streamed_units = 0;
  uint64_t slab_bytes_filled = 0;
  uint64_t warm_slab_hits = 0;
  uint64_t warm_slab_misses = 0;
  uint64_t runner_waits = 0;
  uint64_t file_bytes_read = 0;
  uint64_t staging_waits = 0;
};

class StreamSessions {
 public:
  // A session opens on a host attachment of `store` (recorded in `registry`, where this marks
  // it as streaming).
  StreamSessions(ComponentStore& store, SessionRegistry& registry, HostPool& pool,
                 GpuInventory gpus, StreamSessionsOptions options);
  StreamSessions(const StreamSessions&) = delete;
  StreamSessions& operator=(const StreamSessions&) = delete;
  ~StreamSessions();

  // NotFound when ddod has no device `device` ("cpu", "cpu:<n>", a GPU UUID or "cuda:N"); the
  // message lists those it has.
  absl::Status CheckDevice(const std::string& device) const;

  // Opens a session on `device` of the component `lease` attached on the host (`attached`),
  // placed by `plan` (decided by policy for attached.component.tensors: policy/stream_planning).
  // On success the session holds the attachment until it closes; on failure the caller gives
  // it back. NotFound (device), ResourceExhausted (ddod's budget on the device, device memory),
  // Unavailable (no CUDA).
  absl::StatusOr<OpenedStream> Open(const Lease& lease, HostAttachment attached,
                                    const std::string& device, SessionPlan plan);

  // Returns the cycle length. `rows` (what the learning forward computed, by weight name) are
  // kept for the session's component, those of its tensors only, for LearnedRows.
  absl::StatusOr<uint32_t> SetSchedule(const std::string& session_id,
                                       std::vector<uint32_t> schedule, WeightRows rows = {});

  // The rows the last learning forward of `owner_uid`'s component `cache_key` reported (of
  // its root base `base_cache_key` when it has none of its own); empty when none did.
  WeightRows LearnedRows(uid_t owner_uid, const std::string& cache_key,
                         const std::string& base_cache_key) const;

  // NotFound when the id is not a streaming session (it may be a host attach).
  absl::Status Detach(const std::string& session_id);

  void ReleaseLease(const std::string& lease_id);
  // Closes everything (ddod stops).
  void CloseAll();

  using PhaseResult = ::ddo::PhaseResult;
  // A pipeline phase of `lease` begins: warm slabs of components outside `keep` are freed;
  // for each component of `prefetch` that had a session before, a slab of its last placement
  // is filled on that device when ddod's budget there has room, so that its next Attach
  // finds it warm (docs/streaming.md §6; PhasePrefetcher).
  // Then the pool step (`pool_step`, PhasePrefetcher): needed file-tier components are read
  // back into the pool before Phase returns, prefetched ones in the background
  // (PoolPrefetcher); a denoising phase's step may demote the caller's unused components
  // outside `keep` to their files for room.
  PhaseResult Phase(const Lease& lease, const std::set<std::string>& keep,
                    const std::vector<std::string>& needed,
                    const std::vector<std::string>& prefetch,
                    PoolStep pool_step = PoolStep::kDemoteForRoom) {
    return prefetcher_.Begin(lease, keep, needed, prefetch, pool_step);
  }
  // Waits for the phases' background promotions (tests).
  void WaitPoolPrefetches() { prefetcher_.WaitPoolIdle(); }

  std::vector<StreamSessionInfo> List();
  // Streaming since start: the closed sessions' final counts plus the open ones' now.
  StreamTotals Totals();

  // Slabs kept warm.
  size_t warm_slab_count() { return devices_.warm_slab_count(); }
  // What ddod's sessions and warm slabs hold on `device` ("cpu", a GPU UUID).
  uint64_t reserved_bytes(const std::string& device) const { return devices_.reserved(device); }

 private:
  // An open session, with what it holds beside itself.
  struct OpenSession {
    std::shared_ptr<StreamSession> session;
    std::string slab_key;                   // WarmSlabCache::Key of its slab
    DeviceBudget::Reservation reservation;  // its slab and ring in ddod's budget
    uid_t owner_uid = 0;                    // whose cache key it streams
  };
  // Makes `session` visible (the map, the registry) and hands it to its worker.
  void Publish(std::shared_ptr<StreamSession> session, DeviceRoom room, uid_t owner_uid,
               StreamWorker* worker);
  // Closes and frees a session already removed from sessions_; keeps its slab warm when it may.
  void CloseSession(OpenSession open, SessionState state);
  // Whether an open session holds the slab of `slab_key` (PhasePrefetcher).
  bool SlabInUse(const std::string& slab_key);

  ComponentStore& store_;
  SessionRegistry& registry_;
  // Declared before everything that holds a Reservation: destroyed after it.
  DeviceTable devices_;
  PhasePrefetcher prefetcher_;

  mutable absl::Mutex mu_;
  std::map<std::string, OpenSession> sessions_ ABSL_GUARDED_BY(mu_);  // by session id
  StreamTotals closed_totals_ ABSL_GUARDED_BY(mu_);
  StreamTotals last_totals_ ABSL_GUARDED_BY(mu_);  // what Totals() returned last
  // Schedules and rows learned per component (its own mutex).
  ScheduleMemory memory_;
};

}  // namespace ddo

#endif  // DDO_DAEMON_STREAM_STREAM_SESSIONS_H_
