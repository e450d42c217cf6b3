// File: daemon/pool/range_pinner.h
//
// Pins a segment part by part while a load writes it: each part is page-locked on a thread of
// the pinner's own as soon as all its bytes are written, so that pinning (the kernel's and the
// driver's work, about as slow as the reading) overlaps the reading instead of following it.
//
// Parts are cut at boundaries the caller chooses (PinParts: at tensor starts), since a copy to
// the device must stay within one registration. Without pinning (no CUDA) it does nothing.
//
// Thread-safety: Written may be called from any thread, concurrently; Finish and the
// destructor from the thread that made the pinner.
#ifndef DDO_DAEMON_POOL_RANGE_PINNER_H_
#define DDO_DAEMON_POOL_RANGE_PINNER_H_

#include <cstdint>
#include <deque>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "daemon/pool/host_pool.h"

namespace ddo {

// The size of the parts loads pin: small enough that the last part's pinning, which follows
// the reading, is short; large enough that a registration's fixed cost does not count.
inline constexpr uint64_t kPinPartBytes = uint64_t{256} << 20;

// A byte range of a segment: [offset, offset + bytes).
struct ByteRange {
  uint64_t offset = 0;
  uint64_t bytes = 0;
};

// Cuts [0, segment_size) into parts of about `target` bytes at the page-aligned starts of
// `extents` (the tensors, in any order, not overlapping; layouts start each unit on a page),
// so that no extent spans two parts and no two parts share a page; an extent larger than
// `target` is a part of its own, with what follows up to the next page-aligned start. `part_of` (optional)
// receives, for each extent in the order given, the index of its part.
std::vector<ByteRange> PinParts(const std::vector<ByteRange>& extents, uint64_t segment_size,
                                uint64_t target, std::vector<size_t>* part_of = nullptr);

class RangePinner {
 public:
  // `written_bytes[i]`: the bytes of part i that the load writes (its extents' bytes); a part
  // with none is pinned at once. `segment` must outlive the pinner.
  RangePinner(PoolSegment& segment, std::vector<ByteRange> parts,
              std::vector<uint64_t> written_bytes);
  RangePinner(const RangePinner&) = delete;
  RangePinner& operator=(const RangePinner&) = delete;
  // Stops after the part being pinned; parts not pinned yet stay unpinned (Pin covers them).
  ~RangePinner();

  // `bytes` more of part `part` are written.
  void Written(size_t part, uint64_t bytes);
  // The segment's bytes [offset, offset + bytes) are written: each part they overlap counts
  // its share (for a copy that writes whole ranges, gaps included: parts built with
  // written_bytes equal to their sizes).
  void WrittenRange(uint64_t offset, uint64_t bytes);

  // Waits until every part whose bytes were all written is pinned; the first pinning error,
  // if any (the segment then serves unpinned parts unpinned until Pin is called again).
  absl::Status Finish();

 private:
  void Run();

  PoolSegment& segment_;
  const std::vector<ByteRange> parts_;
  absl::Mutex mu_;
  std::vector<uint64_t> remaining_ ABSL_GUARDED_BY(mu_);
  std::deque<size_t> ready_ ABSL_GUARDED_BY(mu_);
  size_t outstanding_ ABSL_GUARDED_BY(mu_) = 0;  // ready or being pinned
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace ddo

#endif  // DDO_DAEMON_POOL_RANGE_PINNER_H_
