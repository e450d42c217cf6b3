// File: daemon/stream/cycle_packing.h
//
// Where each use of a schedule cycle lies in a session's ring arena. Units pack back to back
// and none wraps around the arena's end. Every cycle is laid out the same way, so use u + L
// lies where use u lies (or, when cycles are small, where use u + k*L does for a small k):
// a runner sees each unit at few places and keeps their views (docs/streaming.md §4). A
// large cycle is followed by padding up to the next lap; a small one tiles the arena.
//
// Thread-safety: a pure function and a value type, safe from any thread.
#ifndef DDO_DAEMON_STREAM_CYCLE_PACKING_H_
#define DDO_DAEMON_STREAM_CYCLE_PACKING_H_

#include <cstdint>
#include <vector>

namespace ddo {

struct CyclePacking {
  uint64_t arena_bytes = 0;  // the part of the arena used: offsets are below it
  // Use u starts at (u / L) * cycle_bytes + starts[u % L] (a virtual position, growing with
  // u), at that modulo arena_bytes in the ring. A whole number of laps, or a divisor of one.
  uint64_t cycle_bytes = 0;
  std::vector<uint64_t> starts;
  uint64_t end = 0;  // where the cycle's last unit ends

  // Room left unused at the end of each cycle.
  uint64_t padding() const { return cycle_bytes - end; }
};

// `spans[i]`: the bytes of the i-th use of the cycle (multiples of `alignment`), each at most
// `arena_bytes`.
CyclePacking PackCycle(const std::vector<uint64_t>& spans, uint64_t arena_bytes,
                       uint64_t alignment = 256);

}  // namespace ddo

#endif  // DDO_DAEMON_STREAM_CYCLE_PACKING_H_
