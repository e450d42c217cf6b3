// File: daemon/store/segment_fill.h
//
// Fills a new pool segment with a load's tensors at memory speed: reader threads read each
// tensor from its file (through the descriptor the file was validated through, never by path)
// and put it at its place (SegmentTarget: through the mapping of a pre-faulted segment, else
// through the segment's own descriptor, so that no page is zeroed before it is filled); a
// RangePinner page-locks the segment part by part (256 MiB, cut at
// tensor starts) as the parts are written, so that pinning overlaps reading.
//
// Thread-safety: FillSegmentFromFiles may be called from any thread; nothing else may write
// the segment meanwhile.
#ifndef DDO_DAEMON_STORE_SEGMENT_FILL_H_
#define DDO_DAEMON_STORE_SEGMENT_FILL_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "daemon/common/file_system.h"
#include "daemon/layout/tensor_table.h"
#include "daemon/pool/host_pool.h"
#include "daemon/store/parallel_reader.h"
#include "daemon/store/safetensors.h"

namespace ddo {

// Where reader threads put bytes into a pool segment: through its mapping when its pages exist
// already (PoolSegment::prefaulted, the reserve's: nothing faults, and writes into one tmpfs
// file would serialise on its lock), else through its descriptor (pages written whole through
// it are never zeroed; a mapping would fault and zero each first).
class SegmentTarget {
 public:
  // Errors: opening the segment's descriptor (for one that is not pre-faulted).
  static absl::StatusOr<SegmentTarget> Of(PoolSegment& segment);
  // Points `job` (its source already set) at `offset` of the segment.
  void Aim(ReadJob& job, uint64_t offset) const;

 private:
  SegmentTarget(PoolSegment& segment, UniqueFd fd) : segment_(&segment), fd_(std::move(fd)) {}
  PoolSegment* segment_;
  UniqueFd fd_;  // invalid for a pre-faulted segment
};

// What a fill took.
struct FillTimes {
  double read_s = 0;      // reading and writing, all threads
  double pin_wait_s = 0;  // pinning left after the reading ended
  bool pinned = false;    // every part pinned (false without CUDA, or after a pinning error)
  bool direct = false;    // read past the page cache (a cold load into a pre-faulted segment)
};

// Reads the tensors of `set` (in file order) to the offsets `laid_out` gives them (the same
// order) in `segment`, with `threads` threads. `progress(done, total)` and `cancelled` as for
// ReadInParallel; its errors (a file that shrank: DataLoss; a full /dev/shm: ResourceExhausted,
// naming the segment). A pinning error is not one: the parts stay unpinned and
// PoolSegment::Pin tries them again.
absl::StatusOr<FillTimes> FillSegmentFromFiles(
    const SafetensorsSet& set, const std::vector<TensorEntry>& laid_out, PoolSegment& segment,
    int threads, const std::function<void(uint64_t, uint64_t)>& progress,
    const std::function<bool()>& cancelled, FileSystem* fs);

}  // namespace ddo

#endif  // DDO_DAEMON_STORE_SEGMENT_FILL_H_
