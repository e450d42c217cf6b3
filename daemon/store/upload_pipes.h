// File: daemon/store/upload_pipes.h
//
// A streamed upload (docs/protocol.md, "Streamed uploads"): the client writes its tensors into
// pipes that ddod made, and ddod reads them straight into the component's segment, the
// pre-faulted and pre-pinned reserve when it has one. The bytes are copied once (by the
// pipe's reader), where a segment upload copies them twice (the client's write into an upload
// segment, then commit's copy into a segment only ddod can write). The client never holds a
// descriptor of the segment served, so nothing it does after the commit reaches those bytes;
// a client that maps its tensors into the pipe (vmsplice) is not even copied from twice.
//
// ddod keeps each pipe's read end (an open file description of its own: nobody else can set
// its flags or read from it) and hands out each write end once, through the identity socket;
// after that it holds none, so the end of the client (or its closing a pipe early) reaches the
// reader as end of file. A stream carries its tensors in the order of their offsets
// (AssignStreams); a reader stops at the first error: a stream that ends early, silence on
// every stream for longer than the idle limit, or cancellation.
//
// Thread-safety: TakeWriteEnds and Fill each once, from one thread; Fill runs its own readers.
#ifndef DDO_DAEMON_STORE_UPLOAD_PIPES_H_
#define DDO_DAEMON_STORE_UPLOAD_PIPES_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "daemon/common/work_progress.h"
#include "daemon/layout/tensor_table.h"
#include "daemon/pool/host_pool.h"
#include "daemon/pool/range_pinner.h"
#include "ddo/wire/unique_fd.h"

namespace ddo {

// The pipes of one upload, at most this many (one reader thread each).
inline constexpr int kMaxUploadStreams = 16;
// The capacity ddod asks for each pipe: a writer maps or copies this much per call.
inline constexpr size_t kUploadPipeBytes = size_t{1} << 20;
// How long every stream of an upload may stay silent before the upload is given up.
inline constexpr absl::Duration kUploadIdleLimit = absl::Seconds(60);

// Which stream carries each of `tensors` (segment 0 only; others get -1): the tensors with
// bytes, in the order of their offsets, cut into `streams` runs of about equal bytes, so that
// each reader fills one contiguous stretch of the segment. Empty tensors travel on no stream.
std::vector<int> AssignStreams(const std::vector<TensorEntry>& tensors, int streams);

// The byte ranges each stream carries, in order, for AssignStreams's `assignment`.
std::vector<std::vector<ByteRange>> StreamRanges(const std::vector<TensorEntry>& tensors,
                                                 const std::vector<int>& assignment,
                                                 int streams);

class UploadPipes {
 public:
  // `count` pipes (1..kMaxUploadStreams), each asked for kUploadPipeBytes of capacity (a
  // smaller one, past the user's pipe quota, still works). The errors of pipe2.
  static absl::StatusOr<std::unique_ptr<UploadPipes>> Create(int count);
  UploadPipes(const UploadPipes&) = delete;
  UploadPipes& operator=(const UploadPipes&) = delete;
  ~UploadPipes() = default;

  int count() const { return static_cast<int>(read_ends_.size()); }

  // The write ends, in stream order, handed over: ddod keeps no write end after this (the
  // caller drops them once granted). Empty on a second call.
  std::vector<UniqueFd> TakeWriteEnds();

  // Reads each stream's `ranges` (StreamRanges) into `segment`, one reader thread per stream,
  // adding the bytes to `progress`. Errors: DataLoss when a stream ends before its bytes
  // (the client closed it or died); DeadlineExceeded when no stream brought a byte for
  // `idle_limit`; Cancelled when `cancelled()` turns true; a read's error otherwise. The
  // first error stops every reader; what was read is left in the segment for the caller to
  // discard.
  absl::Status Fill(PoolSegment& segment, const std::vector<std::vector<ByteRange>>& ranges,
                    WorkProgress* progress, const std::function<bool()>& cancelled,
                    absl::Duration idle_limit = kUploadIdleLimit);

 private:
  UploadPipes() = default;

  std::vector<UniqueFd> read_ends_;   // O_NONBLOCK, ddod's own
  std::vector<UniqueFd> write_ends_;  // until TakeWriteEnds
};

}  // namespace ddo

#endif  // DDO_DAEMON_STORE_UPLOAD_PIPES_H_
