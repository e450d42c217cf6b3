// File: daemon/store/tier_units.h
//
// Which units of a component the pool keeps when it cannot keep all of them (the file tier,
// docs/architecture.md §6): the margin a promotion leaves free for streaming sessions, and
// the units chosen spread over the component, so that a pass alternates units read from
// files with pool units. Used by PromoteToFit (at load) and Promote (phases).
//
// Thread-safety: pure functions of their arguments.
#ifndef DDO_DAEMON_STORE_TIER_UNITS_H_
#define DDO_DAEMON_STORE_TIER_UNITS_H_

#include <cstdint>
#include <set>
#include <vector>

#include "daemon/layout/tensor_table.h"

namespace ddo {

// What a promotion leaves free in the pool for streaming sessions: a session's staging and a
// host-backend ring (about 16 of the largest unit), and at least an eighth of `budget` (at
// most 2 GiB).
uint64_t SessionMargin(const std::vector<TensorEntry>& tensors, uint64_t budget);

// The units to keep in the pool, about `room` bytes of them, spread over the units of
// `tensors` in order (error diffusion).
std::set<uint32_t> SpreadUnits(const std::vector<TensorEntry>& tensors, uint64_t room);

// The smallest promotion worth a read: min(64 MiB, budget / 16).
uint64_t LeastWorthPromoting(uint64_t budget);

}  // namespace ddo

#endif  // DDO_DAEMON_STORE_TIER_UNITS_H_
