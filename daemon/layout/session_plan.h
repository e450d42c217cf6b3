// File: daemon/layout/session_plan.h
//
// The placement of one streaming session, as the stream layer runs it: which tensors sit in
// the resident slab and where, how the streamed weights group into units, how large the ring
// is, and the decisions that led there, each with its reason. Policy decides a plan
// (policy/stream_planning.h); the stream layer allocates, fills and streams it.
//
// Thread-safety: value types: a plan is built by the policy on one thread, then immutable while
// its session streams it; copies are independent.
#ifndef DDO_DAEMON_LAYOUT_SESSION_PLAN_H_
#define DDO_DAEMON_LAYOUT_SESSION_PLAN_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace ddo {

// What each streamable Linear computed in a runner's learning forward, by its weight's name:
// the rows of its input summed over its calls (SetScheduleRequest.weight_rows). The planner
// weighs a weight's copy against this compute when it chooses the resident set. Empty: not
// learned yet.
using WeightRows = std::map<std::string, uint64_t>;

struct PlannedTensor {
  uint32_t table_index = 0;  // into the component's tensor table
  uint64_t offset = 0;       // in the slab, or from the start of its unit
};

struct StreamUnit {
  std::string name;  // the block ("transformer_blocks.3") or the Linear's module path
  uint64_t span_bytes = 0;    // bytes it occupies in a slot (with alignment)
  uint64_t tensor_bytes = 0;  // bytes copied
  std::vector<PlannedTensor> tensors;
};

struct PlanDecisionEntry {
  std::string key;
  std::string value;
  std::string reason;
};

struct SessionPlan {
  std::vector<PlannedTensor> resident;
  uint64_t slab_bytes = 0;
  uint64_t resident_bytes = 0;  // tensor bytes in the slab
  std::vector<StreamUnit> units;
  // The ring: an arena that packs the units streaming the schedule (each at its own offset,
  // so small units do not take a slot of the largest one), then one slot of the largest unit
  // for out-of-schedule uses.
  uint64_t slot_bytes = 0;   // the largest unit
  uint64_t arena_bytes = 0;  // DDO_RING_SLOTS x slot_bytes
  uint32_t ring_slots = 0;   // units in flight at most; slot ring_slots is the out-of-schedule one
  uint64_t streamed_bytes = 0;  // tensor bytes of all units
  std::vector<PlanDecisionEntry> decisions;
  // Identifies the units (names and grouping): a schedule learned for one plan fits another
  // with the same signature.
  std::string signature;
  // Identifies the slab's contents (which tensors, where): a warm slab with the same
  // signature, of the same component bytes, can serve another session.
  std::string slab_signature;

  uint64_t ring_bytes() const { return arena_bytes + slot_bytes; }
  uint64_t device_bytes() const { return slab_bytes + ring_bytes(); }
};

}  // namespace ddo

#endif  // DDO_DAEMON_LAYOUT_SESSION_PLAN_H_
