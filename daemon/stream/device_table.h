// File: daemon/stream/device_table.h
//
// The devices ddod streams on and what its sessions share on each: ddod's budget there
// (DeviceBudget; each open session and each warm slab holds a Reservation), the copy worker
// (StreamWorker, started with the device's first session) and the warm slabs closed sessions
// left (WarmSlabCache, with the placement each component had last, which a phase's prefetch
// follows). StreamSessions opens and closes sessions over it; PhasePrefetcher frees and fills
// warm slabs through it.
//
// Thread-safety: all methods may be called from any thread. mu_ guards the workers and the
// warm slabs and is a leaf: nothing is called out under it but the budget (its own lock) and
// the cache. Slow work (allocating a slab, freeing the slabs that gave way) runs outside it.
#ifndef DDO_DAEMON_STREAM_DEVICE_TABLE_H_
#define DDO_DAEMON_STREAM_DEVICE_TABLE_H_

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "daemon/platform/gpu_inventory.h"
#include "daemon/store/component_store.h"
#include "daemon/stream/device_budget.h"
#include "daemon/stream/resident_slab.h"
#include "daemon/layout/session_plan.h"
#include "daemon/stream/file_read_pool.h"
#include "daemon/stream/unit_source.h"
#include "daemon/stream/stream_worker.h"
#include "daemon/stream/warm_slab_cache.h"

namespace ddo {

struct DeviceTableOptions {
  // ddod's own VRAM budget per device (all sessions' slabs and rings); 0: the whole device.
  uint64_t vram_budget_bytes = 0;
  // "cpu" sessions (host backend): a budget of their own per host device; 0: unlimited
  // (ddod sets its RAM budget).
  uint64_t host_budget_bytes = 0;
  // When set, host-backend sessions' slabs and rings are also counted in this pool's budget
  // (ddod's one RAM budget: segments, and the RAM its sessions hold beside them). It must
  // outlive the table.
  HostPool* host_pool = nullptr;
  // Host-backend devices: "cpu" (also "cpu:0"), then "cpu:1" ... "cpu:<host_devices - 1>",
  // each with its own copy worker and budget.
  int host_devices = 1;
  // warm_process: a closed session's filled slab stays on its device for the next session of
  // the same component and plan, until its room is needed (least recently used first).
  bool keep_slabs_warm = false;
  // The file tier: threads that read units from backing files (0: the CPUs, 2 to 8), and
  // staging buffers per session.
  int file_read_threads = 0;
  uint32_t file_staging_buffers = kFileStagingBuffers;
};

// A device a session may stream on.
struct StreamDevice {
  std::string label;  // "cpu", "cpu:<n>" or the GPU UUID
  int ordinal = -1;   // -1 for the host backend
  uint64_t budget_bytes = 0;  // 0: unlimited
};

// Where a new session's slab comes from and the device bytes it holds under ddod's budget.
struct DeviceRoom {
  std::shared_ptr<ResidentSlab> slab;
  bool slab_warm = false;  // a closed session's slab, already filled
  std::string slab_key;    // WarmSlabCache::Key
  DeviceBudget::Reservation reservation;  // slab + ring
};

// What a closed session gives back: its room, and its slab to keep warm when it may.
struct ClosedRoom {
  std::string device;
  std::string slab_key;
  std::shared_ptr<ResidentSlab> slab;  // filled
  uint64_t slab_bytes = 0;
  std::string cache_key;
  uid_t owner_uid = 0;
  bool failed = false;  // a failed session's slab is not kept
  DeviceBudget::Reservation reservation;  // slab + ring
};

class DeviceTable {
 public:
  // `segment_prefix` begins the names of the shared-memory segments of host slabs, rings,
  // control blocks and doorbells: the pool's, so that a restarted ddod removes what a crashed
  // one left.
  DeviceTable(GpuInventory gpus, DeviceTableOptions options, std::string segment_prefix);
  DeviceTable(const DeviceTable&) = delete;
  DeviceTable& operator=(const DeviceTable&) = delete;
  ~DeviceTable() { Shutdown(); }

  const DeviceTableOptions& options() const { return options_; }

  // `requested`: "cpu", "cpu:<n>", a GPU UUID or "cuda:N". NotFound when ddod has no such
  // device (the message lists those it has), Unavailable for a GPU without CUDA.
  absl::StatusOr<StreamDevice> Resolve(const std::string& requested) const;

  // The copy worker of `device`, started on first use.
  absl::StatusOr<StreamWorker*> WorkerFor(const StreamDevice& device);
  // The worker started for `label`; nullptr when none was.
  StreamWorker* FindWorker(const std::string& label);

  // A warm slab of the same component bytes and placement, or room for a new one, reserved
  // before anything is allocated; warm slabs give way, least recently used first. Remembers
  // the placement as the component's recipe. ResourceExhausted names the sizes.
  absl::StatusOr<DeviceRoom> ReserveRoom(const StreamDevice& device,
                                         const HostAttachment& attached, const SessionPlan& plan);
  // Takes a closed session's room back: with warm_process its slab stays warm with its share of
  // the budget (unless it failed or one is already kept under its key), the newest one per
  // device; the rest of the reservation goes back. True when the slab was kept.
  bool ReturnRoom(ClosedRoom closed);

  // A new slab on `ordinal` (-1: a host slab in a segment of its own).
  absl::StatusOr<std::unique_ptr<ResidentSlab>> OpenSlab(int ordinal, uint64_t bytes) const;

  // Warm slabs and recipes, for PhasePrefetcher. `recipe_key` is "<owner uid>:<cache key>".
  std::vector<WarmSlab> TakeWarmIf(const std::function<bool(const WarmSlab&)>& which);
  std::optional<SlabRecipe> RecipeOf(const std::string& recipe_key) const;
  bool HasWarm(const std::string& slab_key) const;
  // False (and `slab` left as it was) when one is kept under the key already.
  bool PutWarm(const std::string& slab_key, WarmSlab& slab);
  std::optional<DeviceBudget::Reservation> TryReserve(const std::string& device,
                                                      uint64_t budget_bytes, uint64_t bytes) {
    return budget_.TryReserve(device, budget_bytes, bytes, RamOf(device));
  }

  // Frees the warm slabs and stops the workers (joins their threads): after the last session
  // closed.
  void Shutdown();

  // The pool a device's bytes are also counted in: the host pool for a host device, none for a
  // GPU.
  HostPool* RamOf(const std::string& device_label) const;
  // ddod's one RAM budget (the host pool), whatever the device: a file-tier session's staging
  // buffers count in it; null in tests that give none.
  HostPool* host_pool() const { return options_.host_pool; }
  uint32_t file_staging_buffers() const { return options_.file_staging_buffers; }
  // The read threads of file-tier sessions (DDO_FILE_READ_THREADS of them), started on first
  // use.
  FileReadPool* FileReaders();

  // A fresh segment name of `kind` ('s' slab, 'r' ring, 'c' control block, 'b' doorbell).
  std::string NewSegmentName(char kind) const;
  // What sessions and warm slabs hold on `device`.
  uint64_t reserved(const std::string& device) const { return budget_.reserved(device); }
  size_t warm_slab_count() const;

 private:
  // Removes the least recently used warm slab of `device`: its bytes go back to the budget at
  // once, its memory into `dropped` (freed outside the lock). False when there is none.
  bool DropWarmSlabLocked(const std::string& device, bool spare_prefetched,
                          std::vector<std::shared_ptr<ResidentSlab>>* dropped)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const GpuInventory gpus_;
  const DeviceTableOptions options_;
  const std::string segment_prefix_;
  // Declared before everything that holds a Reservation: destroyed after it.
  DeviceBudget budget_;

  mutable absl::Mutex mu_;
  std::map<std::string, std::unique_ptr<StreamWorker>> workers_ ABSL_GUARDED_BY(mu_);
  // The file tier's read threads, started with the first session that reads files; stopped
  // before the workers, whose doorbells their reads ring.
  std::unique_ptr<FileReadPool> file_readers_ ABSL_GUARDED_BY(mu_);
  WarmSlabCache warm_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ddo

#endif  // DDO_DAEMON_STREAM_DEVICE_TABLE_H_
