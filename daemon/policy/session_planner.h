// File: daemon/policy/session_planner.h
//
// Places one streaming session under settings already decided (docs/streaming.md §1):
// tensors the runner cannot stream, small weights and always-resident modules go to the
// resident slab; the rest is streamed per Linear or per repeated block; under the resident
// budget whole blocks are made resident, spread evenly as in the seed; the ring is sized to
// the largest unit. Every decision is recorded in the plan with its reason. The stream layer
// runs the plan (stream/session_plan.h is the plan's shape).
//
// Thread-safety: pure functions.
#ifndef DDO_DAEMON_POLICY_SESSION_PLANNER_H_
#define DDO_DAEMON_POLICY_SESSION_PLANNER_H_

#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "daemon/policy/stream_settings.h"
#include "daemon/layout/tensor_table.h"
#include "daemon/layout/session_plan.h"

namespace ddo {

// Plans a session. `streamable` names tensors of `tensors`; each must be a 2-D floating
// ".weight" with a name of at most kMaxModulePathBytes (InvalidArgument otherwise).
// ResourceExhausted when the VRAM budget cannot hold the resident tensors, the ring and the
// activation reserve.
//
// `rows`: what a learning forward of the component computed. With them, and
// DDO_RESIDENT_MODULE_SELECTION auto (the default) or compute, the resident budget keeps the
// weights of the candidate blocks with the least compute per byte (rows x elements / bytes)
// rather than whole blocks: a weight whose copy its compute cannot hide (a modulation Linear
// that sees one row, a bf16 weight among fp8 ones) stays on the device, and the copies that
// remain are spread over compute that hides them. Without rows, auto is spread.
absl::StatusOr<SessionPlan> PlanSession(const std::vector<TensorEntry>& tensors,
                                        const std::set<std::string>& streamable,
                                        const StreamSettings& settings,
                                        const WeightRows& rows = {});

}  // namespace ddo

#endif  // DDO_DAEMON_POLICY_SESSION_PLANNER_H_
