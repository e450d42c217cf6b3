// File: daemon/store/direct_fill.h
//
// A cold load read past the page cache (O_DIRECT) into a pre-faulted segment. When a load's
// files are not in the page cache, buffered reads add the kernel's copy into the cache and its
// readahead limits to the disk's time; reading aligned 16 MiB chunks with O_DIRECT, each into a
// bounce buffer of its reader thread and copied from there to the tensors' places, keeps the
// disk as busy as `dd iflag=direct` does. The files are opened again read-only through
// /proc/self/fd (a new open file description: the client's own descriptor, which it may share,
// keeps its flags), never by a client's path.
//
// Thread-safety: both functions may be called from any thread; FillDirect's caller keeps the
// segment untouched until it returns.
#ifndef DDO_DAEMON_STORE_DIRECT_FILL_H_
#define DDO_DAEMON_STORE_DIRECT_FILL_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "daemon/common/file_system.h"
#include "daemon/layout/tensor_table.h"
#include "daemon/pool/host_pool.h"
#include "daemon/store/safetensors.h"

namespace ddo {

// Whether most of the set's tensor bytes are out of the page cache: non-blocking reads
// (RWF_NOWAIT) of a few pages spread over each file find them missing. False where the probe
// cannot tell.
bool MostlyUncached(const SafetensorsSet& set);

// Reads every tensor of `set` (in file order) to the offsets `laid_out` gives them in the
// pre-faulted `segment` (written through its mapping), with `threads` threads.
// `written(tensor, bytes)` is called from the threads as pieces of the flat tensor index land;
// `progress(done, total)` with the bytes so far, never two calls at once; `cancelled` before
// each chunk. Unimplemented when a file cannot be opened with O_DIRECT (the file system has no
// direct I/O): nothing was written, and a buffered read can take over. DataLoss when a file
// shrank; read errors name the file; Cancelled. Opens and reads go through `fs` (nullptr: the
// default).
absl::Status FillDirect(const SafetensorsSet& set, const std::vector<TensorEntry>& laid_out,
                        PoolSegment& segment, int threads,
                        const std::function<void(size_t tensor, uint64_t bytes)>& written,
                        const std::function<void(uint64_t, uint64_t)>& progress,
                        const std::function<bool()>& cancelled, FileSystem* fs = nullptr);

}  // namespace ddo

#endif  // DDO_DAEMON_STORE_DIRECT_FILL_H_
