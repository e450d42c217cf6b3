// File: daemon/store/spill_file.h
//
// An uploaded component's bytes written to a file of ddod's own (docs/architecture.md §6,
// "Spilling uploads"), so that it has backing files as a component loaded from safetensors
// does: demoted to them when the pool needs room, streamed from them, read back later. The
// file is unnamed (O_TMPFILE in ddod's spill directory; where the file system lacks it, a
// name created exclusively and unlinked at once): nothing is left on disk once its last
// descriptor closes, whatever way ddod ends, and no path of it is ever opened again. The
// bytes are copied through descriptors (ReadInParallel, no mapping), flushed, and dropped
// from the page cache: a spill is there to free RAM, not to fill the cache with a copy. The
// descriptor kept is a read-only one (reopened through /proc/self/fd): what clients are
// granted of it (a FILE segment) is read-only, as for any backing file.
//
// Thread-safety: SpillToFile has no state; segments may be read by others meanwhile (it only
// reads them).
#ifndef DDO_DAEMON_STORE_SPILL_FILE_H_
#define DDO_DAEMON_STORE_SPILL_FILE_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "daemon/common/file_system.h"
#include "daemon/layout/tensor_table.h"
#include "daemon/pool/host_pool.h"
#include "daemon/store/backing_files.h"

namespace ddo {

// Each tensor's range in a spill file of `tensors`: in table order, each at a 4 KiB-aligned
// offset. Sets `*size` to the file's size.
std::vector<FileRange> SpillLayout(const std::vector<TensorEntry>& tensors, uint64_t* size);

// Writes the bytes of `tensors` (tensor.segment indexes `segments`) to a new unnamed file in
// `directory` with `threads` threads. Errors: the directory cannot hold a file
// (ResourceExhausted when it is full: fallocate's ENOSPC), a read or write failed, or
// `cancelled` said so (Cancelled); nothing is left behind either way.
absl::StatusOr<BackingFiles> SpillToFile(const std::string& directory,
                                         const std::vector<TensorEntry>& tensors,
                                         const std::vector<std::shared_ptr<PoolSegment>>& segments,
                                         int threads, const std::function<bool()>& cancelled,
                                         FileSystem* fs);

}  // namespace ddo

#endif  // DDO_DAEMON_STORE_SPILL_FILE_H_
