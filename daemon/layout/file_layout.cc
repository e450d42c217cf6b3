// File: daemon/layout/file_layout.cc
//
// CoalesceRanges: one sort, then one pass that extends the current range while the next one
// starts within `max_gap` of its end.
//
// Thread-safety: pure functions.
#include "daemon/layout/file_layout.h"

#include <algorithm>
#include <tuple>

namespace ddo {

std::vector<FileRange> CoalesceRanges(std::vector<FileRange> ranges, uint64_t max_gap) {
  ranges.erase(std::remove_if(ranges.begin(), ranges.end(),
                              [](const FileRange& range) { return range.bytes == 0; }),
               ranges.end());
  std::sort(ranges.begin(), ranges.end(), [](const FileRange& a, const FileRange& b) {
    return std::tie(a.file, a.offset, a.bytes) < std::tie(b.file, b.offset, b.bytes);
  });
  std::vector<FileRange> merged;
  for (const FileRange& range : ranges) {
    if (!merged.empty()) {
      FileRange& last = merged.back();
      // Sorted by offset: range.offset >= last.offset; a start inside `last` is no gap.
      const bool near = range.offset <= last.end() || range.offset - last.end() <= max_gap;
      if (last.file == range.file && near) {
        last.bytes = std::max(last.end(), range.end()) - last.offset;
        continue;
      }
    }
    merged.push_back(range);
  }
  return merged;
}

uint64_t TotalRangeBytes(const std::vector<FileRange>& ranges) {
  uint64_t total = 0;
  for (const FileRange& range : ranges) total += range.bytes;
  return total;
}

}  // namespace ddo
