// File: daemon/stream/slab_file_fill.h
//
// Fills the part of a resident slab whose tensors lie in backing files (the file tier). The
// reads run on a few threads, each into one of a small set of bounce buffers, while the
// calling thread copies every filled buffer into the slab: the slab's copies stay on one
// thread (a device slab copies from pageable memory before its Copy returns, so a buffer is
// free again at once), and a fill takes about the longer of the reads and the copies rather
// than their sum. One thread doing both, 16 MiB at a time, filled T5-XXL's 4.3 GiB slab at
// 4.4 GB/s on the H100 (docs/benchmarks.md, run 76).
//
// Thread-safety: FillSlabFromFiles is a blocking call; its threads end before it returns.
#ifndef DDO_DAEMON_STREAM_SLAB_FILE_FILL_H_
#define DDO_DAEMON_STREAM_SLAB_FILE_FILL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "daemon/layout/file_layout.h"
#include "daemon/store/component_bytes.h"
#include "daemon/stream/resident_slab.h"

namespace ddo {

// The most one read (one bounce buffer) holds. A fill holds its readers + 2 such buffers
// outside the pool's budget (24 MiB with 4 readers; one fill ran with one 16 MiB buffer
// before), once per session being opened: small, so that concurrent opens stay cheap.
inline constexpr uint64_t kSlabFileChunkBytes = uint64_t{4} << 20;

// One read of a slab fill: `range` of the backing files goes to `slab_offset`.
struct SlabFileChunk {
  uint64_t slab_offset = 0;
  FileRange range;
  const std::string* tensor_name = nullptr;  // for errors; outlives the fill
};

// Appends the chunks (at most kSlabFileChunkBytes each) that bring a tensor's `range` to
// `slab_offset`.
void AppendSlabFileChunks(uint64_t slab_offset, const FileRange& range,
                          const std::string& tensor_name, std::vector<SlabFileChunk>& chunks);

// Reads `chunks` from `host`'s backing files on `threads` threads and copies each into `slab`
// on this thread. The first error, read or copy, stops the fill and is returned naming the
// tensor ("filling the slab with 'NAME': ..."); the slab's copies already made stay made (the
// caller drops a slab that failed).
absl::Status FillSlabFromFiles(ResidentSlab& slab, const std::vector<SlabFileChunk>& chunks,
                               const ComponentBytes& host, int threads);

}  // namespace ddo

#endif  // DDO_DAEMON_STREAM_SLAB_FILE_FILL_H_
