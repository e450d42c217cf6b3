// File: daemon/policy/stream_planning.h
//
// The plan a streaming session of a component gets on a device, decided in one place for
// Attach and ExplainPlan: from the session's settings (parsed by the caller with
// ParseStreamSettings, so that a bad value is refused before anything is attached), the
// resident budget chosen when they leave it open (resident_policy), then the tensors placed
// (session_planner). The policy's decisions come first in the plan.
//
// Thread-safety: pure functions.
#ifndef DDO_DAEMON_POLICY_STREAM_PLANNING_H_
#define DDO_DAEMON_POLICY_STREAM_PLANNING_H_

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "daemon/policy/resident_policy.h"
#include "daemon/policy/stream_settings.h"
#include "daemon/layout/tensor_table.h"
#include "daemon/layout/session_plan.h"

namespace ddo {

// `settings` are ParseStreamSettings(values); `rows` what an earlier learning forward of the
// component computed (session_planner.h). InvalidArgument for a bad streamable name or
// pattern (named); ResourceExhausted when the VRAM budget cannot hold the plan.
absl::StatusOr<SessionPlan> PlanStreamSession(const std::vector<TensorEntry>& tensors,
                                              const std::set<std::string>& streamable,
                                              StreamSettings settings,
                                              const std::map<std::string, std::string>& values,
                                              const MachineFacts& machine,
                                              const WeightRows& rows = {});

// "transfer_per_pass": `streamed_bytes` over the device's measured bandwidth, the least a
// pass can take; nothing when the bandwidth is unknown.
std::optional<PlanDecisionEntry> TransferPerPass(const MachineFacts& machine,
                                                 uint64_t streamed_bytes);

}  // namespace ddo

#endif  // DDO_DAEMON_POLICY_STREAM_PLANNING_H_
