// File: daemon/stream/unit_source.h
//
// Where a session's units come from (docs/architecture.md §6, the file tier). A unit whose
// tensors are all in the pool is copied to the ring in place, from the pool's segments. A unit
// with a tensor in a backing file is first read into a staging buffer laid out as the unit is
// in the ring (each tensor at its planned offset), by the read threads (FileReadPool) in
// chunks, with positional reads through the descriptors ddod holds; the ring copy then reads
// the buffer, which stays taken until that copy has finished (Release, when the session
// publishes the unit).
//
// Reads are keyed by the use they are for (a use of the schedule, or an out-of-schedule
// request), so the session can start them ahead (Prefetch) while earlier units are copied, and
// drop those the runner skipped (DropBelow): a dropped read's buffer comes back once the read
// ends. When a read ends, `wake` is called (the device worker's doorbell).
//
// Thread-safety: one thread at a time (the device's copy worker, or the opener before the
// session is published); the read threads touch only what each read owns.
#ifndef DDO_DAEMON_STREAM_UNIT_SOURCE_H_
#define DDO_DAEMON_STREAM_UNIT_SOURCE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "daemon/layout/session_plan.h"
#include "daemon/layout/tensor_table.h"
#include "daemon/pool/host_pool.h"
#include "daemon/store/component_bytes.h"
#include "daemon/stream/file_read_pool.h"
#include "daemon/stream/staging_buffers.h"

namespace ddo {

// How many staging buffers a session of a file-tier component takes by default (each the
// plan's slot size): units read ahead while one is copied (DDO_FILE_STAGING_BUFFERS).
inline constexpr uint32_t kFileStagingBuffers = 4;
// The most one read job reads: a unit is split into jobs of about this size, which the read
// threads take in turn.
inline constexpr uint64_t kFileReadJobBytes = uint64_t{8} << 20;

// The staging a session over `host` needs for `plan`: `buffers` buffers of the plan's slot
// size when the component has backing files and units to stream, page-locked when `pin`,
// counted in `ram` (StagingBuffers::Create's errors); null when it needs none.
absl::StatusOr<std::unique_ptr<StagingBuffers>> StagingFor(const ComponentBytes& host,
                                                           const SessionPlan& plan,
                                                           uint32_t buffers, bool pin,
                                                           HostPool* ram);

// How a session reads its file units: the staging, the read threads (null: each read runs on
// the caller's thread, at once) and what to call when a read ends (may be empty).
struct FileReading {
  std::shared_ptr<StagingBuffers> staging;
  FileReadPool* readers = nullptr;
  std::function<void()> wake;
};

class UnitSource {
 public:
  UnitSource(ComponentBytes host, FileReading reading);
  UnitSource(const UnitSource&) = delete;
  UnitSource& operator=(const UnitSource&) = delete;
  // Reads still running finish into buffers they keep alive themselves.
  ~UnitSource() = default;

  // Where a unit's bytes are for the ring copy: the unit's image (its span, each tensor at its
  // planned offset) in staging buffer `buffer`, or in place in the pool (`buffer` empty, and
  // the copy takes each tensor from ComponentBytes::DataOf).
  struct Staged {
    std::optional<uint32_t> buffer;
    const char* image = nullptr;  // with `buffer`: the unit's image
  };
  // The unit of use `key` (whose table is `tensors`), staged: nullopt while its read runs, or
  // when no staging buffer is free to start it (ask again after a wake or a Release); a read
  // error (DataLoss when a file shrank, naming it) fails the session.
  absl::StatusOr<std::optional<Staged>> Stage(uint64_t key, const StreamUnit& unit,
                                              const std::vector<TensorEntry>& tensors);
  // Starts reading `unit` for use `key` ahead of need when it lies in a file and is not being
  // read yet; false when that takes a buffer and fewer than two are free (look no further
  // ahead): the last one is kept for the use in turn or an out-of-schedule request, so reads
  // ahead never hold every buffer while the runner waits on a request.
  bool Prefetch(uint64_t key, const StreamUnit& unit, const std::vector<TensorEntry>& tensors);
  // Whether Stage(key, unit) would answer now: a pool unit, a finished read, or a read it can
  // start (a free buffer). False while the read runs: its end wakes the worker.
  bool CanStage(uint64_t key, const StreamUnit& unit) const;
  // The reads started for uses below `key` of the schedule (`key` < kSyncKeys) will not be
  // used: the runner skipped those uses.
  void DropBelow(uint64_t key);
  // Gives back the staging buffer of a unit whose ring copy finished.
  void Release(const Staged& staged);

  const ComponentBytes& host() const { return host_; }
  bool reads_files() const { return host_.files() != nullptr; }
  // Bytes read from files by reads that were staged, and the staging held (0 for a pool
  // component).
  uint64_t file_bytes_read() const { return file_bytes_read_; }
  uint64_t staging_bytes() const { return staging_ ? staging_->total_bytes() : 0; }
  uint32_t staging_buffers() const { return staging_ ? staging_->count() : 0; }

  // Keys of out-of-schedule requests: kSyncKeys + the request's number.
  static constexpr uint64_t kSyncKeys = uint64_t{1} << 63;

 private:
  struct Read;  // shared with the read jobs
  struct Pending {
    uint64_t key;
    uint32_t buffer;
    std::shared_ptr<Read> read;
  };
  bool InFiles(const StreamUnit& unit) const;
  // Takes a buffer and starts the unit's reads into it; nullopt when no buffer is free.
  std::optional<Pending> StartRead(uint64_t key, const StreamUnit& unit,
                                   const std::vector<TensorEntry>& tensors);
  // Buffers of dropped reads that ended come back.
  void ReapDropped();
  const Pending* Find(uint64_t key) const;

  const ComponentBytes host_;
  const std::shared_ptr<StagingBuffers> staging_;
  FileReadPool* const readers_;
  const std::function<void()> wake_;
  std::vector<Pending> pending_;  // reads not yet staged, a handful
  std::vector<Pending> dropped_;  // reads no use will take, until they end
  uint64_t file_bytes_read_ = 0;
};

}  // namespace ddo

#endif  // DDO_DAEMON_STREAM_UNIT_SOURCE_H_
