// File: daemon/layout/file_layout.h
//
// Where a file-backed component's bytes lie in its backing files (docs/architecture.md §6,
// the file tier): a FileRange is a span of one of the component's files, named by its index
// in the component's list of files. A streaming unit's tensors are usually adjacent in a
// safetensors file, so the few ranges a unit needs are merged into fewer, longer reads:
// CoalesceRanges joins two ranges of the same file when the gap between them is at most
// `max_gap` bytes (reading a small gap costs less than a second request).
//
// Thread-safety: FileRange is a value; the functions are pure.
#ifndef DDO_DAEMON_LAYOUT_FILE_LAYOUT_H_
#define DDO_DAEMON_LAYOUT_FILE_LAYOUT_H_

#include <cstdint>
#include <vector>

namespace ddo {

struct FileRange {
  uint32_t file = 0;    // index in the component's backing files
  uint64_t offset = 0;  // absolute offset in that file
  uint64_t bytes = 0;
  // The first offset past the range.
  uint64_t end() const { return offset + bytes; }
  bool operator==(const FileRange& other) const {
    return file == other.file && offset == other.offset && bytes == other.bytes;
  }
};

// The gap under which two ranges of a unit are read as one by default: about what a second
// request costs on NVMe at a few GB/s.
inline constexpr uint64_t kDefaultCoalesceGap = uint64_t{64} << 10;

// The ranges sorted by (file, offset), empty ones dropped, and each run of ranges of one file
// whose gaps are at most `max_gap` bytes (overlapping or touching ones included) merged into
// the one range that covers them. The result covers every input byte, and no two of its
// ranges of one file are closer than `max_gap` + 1 bytes. Callers keep offsets far below
// 2^63 (safetensors validation and kMaxComponentBytes do).
std::vector<FileRange> CoalesceRanges(std::vector<FileRange> ranges, uint64_t max_gap);

// Sum of the ranges' bytes.
uint64_t TotalRangeBytes(const std::vector<FileRange>& ranges);

}  // namespace ddo

#endif  // DDO_DAEMON_LAYOUT_FILE_LAYOUT_H_
