// File: daemon/stream/cycle_packing.cc
#include "daemon/stream/cycle_packing.h"

#include <algorithm>

namespace ddo {
namespace {

uint64_t AlignUp(uint64_t value, uint64_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
}

}  // namespace

CyclePacking PackCycle(const std::vector<uint64_t>& spans, uint64_t arena_bytes,
                       uint64_t alignment) {
  CyclePacking packing;
  packing.arena_bytes = arena_bytes;
  uint64_t position = 0;
  for (uint64_t span : spans) {
    if (position % arena_bytes + span > arena_bytes) position += arena_bytes - position % arena_bytes;
    packing.starts.push_back(position);
    position += span;
  }
  packing.end = position;
  if (position * 2 <= arena_bytes && position > 0) {
    // Several cycles per lap: they tile an arena of a whole number of them.
    packing.cycle_bytes = AlignUp(position, alignment);
    packing.arena_bytes = arena_bytes / packing.cycle_bytes * packing.cycle_bytes;
  } else {
    // The next cycle starts a lap. The padding before it costs room only while the cycle
    // boundary is ahead of the runner, about one lap in cycle_bytes / arena_bytes.
    packing.cycle_bytes = std::max<uint64_t>(AlignUp(position, arena_bytes), arena_bytes);
  }
  return packing;
}

}  // namespace ddo
