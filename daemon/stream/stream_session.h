// File: daemon/stream/stream_session.h
//
// One streaming session as ddod's copy worker drives it: the plan, the device memory, the
// control block, the schedule and the producer's position. Units of the schedule pack into the
// ring's arena back to back, so the arena holds many small units ahead of the runner, not one
// per slot of the largest unit. Step() does at most one unit of
// work (an out-of-schedule request first, else the next use of the cycle) so that the worker
// can share a device fairly between sessions (docs/streaming.md §4).
//
// Thread-safety: Step(), HasWork() and FillSlab() run on one thread at a time (the worker, or
// the opener before the session is handed to the worker). SetSchedule(), Close() and Stats()
// may be called from any thread.
#ifndef DDO_DAEMON_STREAM_STREAM_SESSION_H_
#define DDO_DAEMON_STREAM_STREAM_SESSION_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "daemon/pool/host_pool.h"
#include "daemon/store/component_bytes.h"
#include "daemon/layout/tensor_table.h"
#include "daemon/stream/control_block.h"
#include "daemon/stream/cycle_packing.h"
#include "daemon/stream/resident_slab.h"
#include "daemon/stream/session_device.h"
#include "daemon/stream/staging_buffers.h"
#include "daemon/stream/unit_source.h"
#include "daemon/layout/session_plan.h"

namespace ddo {

struct StreamSessionStats {
  uint64_t produced_uses = 0;
  uint64_t sync_uses = 0;  // out-of-schedule requests served
  uint64_t streamed_bytes = 0;
  uint64_t consumed_uses = 0;  // as the runner reports
  uint64_t skipped_uses = 0;
  uint32_t schedule_length = 0;
  bool failed = false;
  uint64_t streamed_units = 0;
  uint64_t slab_bytes_filled = 0;  // 0 for a slab that arrived warm
  bool slab_was_warm = false;
  uint64_t runner_waits = 0;  // units published while the runner was blocked on one
  uint64_t file_bytes_read = 0;  // read from backing files (the file tier)
  uint64_t staging_bytes = 0;    // staging buffers held for those reads
  uint64_t staging_waits = 0;    // uses whose file read was not done when the ring had room
};

class StreamSession {
 public:
  StreamSession(std::string id, std::string lease_id, std::string cache_key, std::string device,
                std::vector<TensorEntry> tensors, ComponentBytes host,
                SessionPlan plan, std::shared_ptr<ResidentSlab> slab, bool slab_filled,
                std::unique_ptr<SessionDevice> device_memory, ControlBlock control,
                FileReading reading = {});
  StreamSession(const StreamSession&) = delete;
  StreamSession& operator=(const StreamSession&) = delete;
  ~StreamSession();

  // Copies the resident tensors into the slab and waits for them (nothing to do for a slab
  // that arrived filled: a warm one).
  absl::Status FillSlab();

  // InvalidArgument for an empty schedule or an unknown unit; FailedPrecondition when the
  // session already has one.
  absl::Status SetSchedule(std::vector<uint32_t> schedule);

  enum class StepResult {
    kWorked,           // copied or published something
    kWaitingOnDevice,  // copies or the runner's kernels are still running: poll again soon
    kIdle,             // nothing to do until the runner moves
  };
  // At most one unit copied, plus every finished copy published.
  StepResult Step();
  // True when Step() would do something now (or soon, without the runner moving).
  bool HasWork();

  // Tells the runner (state closed) and stops serving; the worker must have let go before
  // the session is destroyed. Drains the copies (bounded).
  void Close(SessionState state);

  StreamSessionStats Stats();

  const std::string& id() const { return id_; }
  const std::string& lease_id() const { return lease_id_; }
  const std::string& cache_key() const { return cache_key_; }
  const std::vector<TensorEntry>& tensors() const { return tensors_; }
  const std::string& device() const { return device_; }
  const SessionPlan& plan() const { return plan_; }
  const SessionDevice& device_memory() const { return *device_memory_; }
  const std::shared_ptr<ResidentSlab>& slab() const { return slab_; }
  const ControlBlock& control() const { return control_; }

 private:
  // Enqueues the copy of one unit, for use `key` (UnitSource's keys), to `ring_offset` and the
  // "ready" record of `slot`, from a staging buffer when it lies in a file (`staged` says
  // which, to release once the copy finished). kFailed marks the session failed (a device or
  // read error); kNotReady: its read runs or waits for a buffer, nothing was done.
  enum class CopyResult { kCopied, kNotReady, kFailed };
  CopyResult CopyUnit(uint32_t unit, uint32_t slot, uint64_t ring_offset, uint64_t key,
                      UnitSource::Staged* staged);
  // Starts the file reads of the uses after `from` that the ring and the staging may take.
  void ReadAhead(uint64_t from, uint64_t consumed);
  // CopyUnit's two ways: each tensor from the pool, or the unit's image from its staging buffer.
  absl::Status CopyInPlace(const StreamUnit& planned, uint64_t ring_offset);
  absl::Status CopyImage(const StreamUnit& planned, const char* image, uint64_t ring_offset);
  // Step's parts. Publishes the copies that finished, in use order, and the out-of-schedule
  // one; sets `published`, and `waiting` when a copy is still in flight; false when the
  // session failed.
  bool PublishFinished(bool& published, bool& waiting);
  // Copies the unit of a pending out-of-schedule request into the extra slot once it is free;
  // nullopt when there is no request to serve now.
  std::optional<StepResult> ServeSyncRequest();
  // Copies the schedule's next use where the ring has room; nullopt when nothing was enqueued
  // (`waiting` set when its room waits on the device).
  std::optional<StepResult> EnqueueNextUse(bool& waiting);

  // Room in the ring for use `use` of `span` bytes: its slot free and its bytes after the last
  // placement (no unit wraps around the arena's end). Retires the oldest placements the runner
  // is done with, once their kernels finished.
  struct Room {
    enum { kFits, kWaitingOnRunner, kWaitingOnDevice } state;
    uint64_t start = 0;  // virtual: the ring offset is start % arena_bytes
  };
  absl::StatusOr<Room> MakeRoom(uint64_t use, uint64_t consumed);
  // Whether MakeRoom would fit `use` once the runner's finished kernels are retired (no device
  // query: for deciding whether the worker may sleep).
  bool WouldFit(uint64_t use, uint64_t consumed) const;
  struct Placed;
  // Whether `placed` must retire before `use`, ending at `end`, can be placed: it holds the
  // slot `use` needs, or bytes `use` would overwrite.
  bool Blocks(const Placed& placed, uint64_t use, uint64_t end) const;
  // Where use `use` starts (virtual) and how many bytes it spans.
  uint64_t PlacementStart(uint64_t use) const;
  uint64_t Span(uint64_t use) const;
  // Takes the worker's copy of the schedule once there is one; false while there is none.
  bool LoadSchedule();
  void Fail(const absl::Status& status);

  const std::string id_;
  const std::string lease_id_;
  const std::string cache_key_;
  const std::string device_;
  const std::vector<TensorEntry> tensors_;
  // Where the units' bytes are: every segment the tensors lie in (a derived version: several),
  // or the backing files read through staging buffers.
  UnitSource source_;
  const SessionPlan plan_;
  const std::shared_ptr<ResidentSlab> slab_;
  bool slab_filled_;
  const bool slab_was_warm_;  // the slab arrived filled (a warm one)
  const std::unique_ptr<SessionDevice> device_memory_;
  ControlBlock control_;

  absl::Mutex mu_;
  std::vector<uint32_t> schedule_ ABSL_GUARDED_BY(mu_);
  // The worker's copy of the schedule, taken when it first sees one (never changes after),
  // and where each use of a cycle lies in the arena.
  std::vector<uint32_t> worker_schedule_;
  CyclePacking packing_;

  // The worker's state.
  struct InFlight {
    uint64_t use;
    uint32_t slot;
    uint64_t ring_offset;
    UnitSource::Staged staged;  // released once the copy finished
  };
  std::deque<InFlight> in_flight_;  // copies enqueued, not yet published, in use order
  // Uses whose bytes are in the arena, until the runner is done with them, in use order.
  // Positions are virtual (they only grow): the ring offset is position % arena_bytes.
  struct Placed {
    uint64_t use;
    uint32_t slot;
    uint64_t start;
  };
  std::deque<Placed> placed_;
  uint64_t next_use_ = 0;
  uint64_t sync_served_ = 0;     // the last request copied
  uint64_t sync_in_flight_ = 0;  // that request, until its copy finished and was published
  UnitSource::Staged sync_staged_;
  uint64_t last_wait_key_ = ~uint64_t{0};  // the last use whose file read was not done
  std::atomic<bool> stopped_{false};
  std::atomic<uint64_t> produced_{0};
  std::atomic<uint64_t> sync_uses_{0};
  std::atomic<uint64_t> streamed_bytes_{0};
  std::atomic<uint64_t> streamed_units_{0};
  std::atomic<uint64_t> slab_bytes_filled_{0};
  std::atomic<uint64_t> runner_waits_{0};
  std::atomic<uint64_t> file_bytes_read_{0};
  std::atomic<uint64_t> staging_waits_{0};
};

}  // namespace ddo

#endif  // DDO_DAEMON_STREAM_STREAM_SESSION_H_
