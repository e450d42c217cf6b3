// File: daemon/store/parallel_reader.h
//
// Reads byte ranges of files straight into memory (the host pool) with positional reads
// (pread) from several threads. One thread rarely saturates NVMe or a page-cache copy; a few
// readers working on 16 MiB chunks in file order do, while keeping the kernel's read-ahead
// useful.
//
// Thread-safety: ReadInParallel and ReadFully may be called from any thread; the caller must
// keep the fds open and the destinations valid until they return, and must not touch the
// destinations meanwhile.
#ifndef DDO_DAEMON_STORE_PARALLEL_READER_H_
#define DDO_DAEMON_STORE_PARALLEL_READER_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "daemon/common/file_system.h"

namespace ddo {

// One range of a file to read: into memory at `destination`, or, when `destination_fd` is
// set, written at `destination_offset` of that file (a pool segment's descriptor) through a
// small buffer of each reader thread. Writing a shared-memory segment through its descriptor
// fills fresh pages without the kernel zeroing them first, as a fault of a mapping would.
struct ReadJob {
  int fd = -1;
  uint64_t file_offset = 0;
  char* destination = nullptr;
  uint64_t bytes = 0;
  std::string path;  // for messages only
  int destination_fd = -1;
  uint64_t destination_offset = 0;
  std::string destination_name = "";  // for messages only
};

inline constexpr uint64_t kDefaultReadChunkBytes = uint64_t{16} << 20;

// Reads every job completely. Jobs are split into chunks of at most `chunk_bytes` that
// `threads` threads (the caller's included) take in order.
//
// `progress` (may be empty) gets the total bytes read so far: from worker threads, never two
// calls at once, with non-decreasing values, at most about every 50 ms, and once more with
// the grand total when everything has been read (not after a failure).
// `cancelled` (may be empty) is asked before each chunk, possibly from several threads at
// once; when it returns true the reading stops and the result is Cancelled.
//
// Errors: the first failure wins and stops the other threads. A file that ends before a
// range does is DataLoss ("<path> shrank while reading ..."); read(2) errors go through
// PosixError; bad arguments (threads < 1 is taken as 1; chunk_bytes == 0, a null destination,
// offsets past 2^63) are InvalidArgument; a write's errors are those of FileSystem::WriteAt.
//
// Every read goes through `fs` (nullptr: FileSystem::Default()).
//
// `chunk_done` (may be empty) is called from the worker threads, possibly at once, after each
// chunk is in place: (the job's index, the chunk's bytes).
absl::Status ReadInParallel(const std::vector<ReadJob>& jobs, int threads,
                            const std::function<void(uint64_t)>& progress,
                            const std::function<bool()>& cancelled,
                            uint64_t chunk_bytes = kDefaultReadChunkBytes,
                            FileSystem* fs = nullptr,
                            const std::function<void(size_t, uint64_t)>& chunk_done = {});

// Reads exactly `bytes` at `file_offset` on the calling thread, retrying EINTR and looping on
// partial reads. `path` is for messages; errors as above.
absl::Status ReadFully(int fd, uint64_t file_offset, char* destination, uint64_t bytes,
                       absl::string_view path, FileSystem* fs = nullptr);

}  // namespace ddo

#endif  // DDO_DAEMON_STORE_PARALLEL_READER_H_
