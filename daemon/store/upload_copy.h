// File: daemon/store/upload_copy.h
//
// Commit's copy of a client-written upload (docs/security.md §3): the bytes a client wrote
// into its upload segment are copied, in the kernel, into a new segment that only ddod can
// write, and the upload segment is emptied and removed, so that no writable mapping of the
// bytes ddod serves survives the commit. The copy is pinned part by part as it is made
// (RangePinner), so that pinning overlaps copying.
//
// Thread-safety: CopyUploadSegment may be called from any thread; nothing else may use the
// upload segment meanwhile.
#ifndef DDO_DAEMON_STORE_UPLOAD_COPY_H_
#define DDO_DAEMON_STORE_UPLOAD_COPY_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "daemon/common/file_system.h"
#include "daemon/common/work_progress.h"
#include "daemon/pool/host_pool.h"
#include "daemon/pool/range_pinner.h"

namespace ddo {

// A new segment of `pool` with the bytes of `upload`, copied by `threads` threads; the
// upload's pages are punched out as they are copied, then it is truncated and unlinked.
// `extents`: where the tensors lie (the pinned parts never split one). `progress` counts the
// bytes copied. FailedPrecondition when the client truncated the upload; the errors of
// FileSystem::CopyRange otherwise; on failure the copy is discarded.
absl::StatusOr<std::shared_ptr<PoolSegment>> CopyUploadSegment(
    HostPool& pool, FileSystem& fs, const PoolSegment& upload,
    const std::vector<ByteRange>& extents, int threads, WorkProgress* progress);

}  // namespace ddo

#endif  // DDO_DAEMON_STORE_UPLOAD_COPY_H_
