// File: daemon/policy/plan_explainer.h
//
// ExplainPlan: the whole decision for one component layout, without loading weights. The
// settings are resolved (settings_resolver), the route follows from them; for the DDO route
// the session is planned exactly as Attach plans it on that device (stream_planning).
//
// Thread-safety: a pure function of its arguments.
#ifndef DDO_DAEMON_POLICY_PLAN_EXPLAINER_H_
#define DDO_DAEMON_POLICY_PLAN_EXPLAINER_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "daemon/policy/resident_policy.h"
#include "daemon/layout/tensor_table.h"
#include "daemon/layout/session_plan.h"

namespace ddo {

struct PlanExplanation {
  std::string route;  // "ddo_stream", "diffusers_group_offload" or "none"
  std::vector<PlanDecisionEntry> decisions;
  uint64_t resident_bytes = 0;
  uint64_t streamed_bytes = 0;
  uint32_t ring_slots = 0;
  // Arguments of diffusers.hooks.apply_group_offloading for "diffusers_group_offload".
  std::map<std::string, std::string> group_offload_args;
};

// `settings` are the call's explicit DDO_* values (DDO_PRESET among them picks the preset,
// default auto); `component` "" is "model". InvalidArgument for a bad setting (named);
// ResourceExhausted when the plan does not fit the VRAM budget.
absl::StatusOr<PlanExplanation> ExplainPlan(
    const std::vector<TensorEntry>& tensors, const std::string& component,
    const std::map<std::string, std::string>& settings,
    const std::map<std::string, std::string>& daemon_environment, const MachineFacts& machine);

}  // namespace ddo

#endif  // DDO_DAEMON_POLICY_PLAN_EXPLAINER_H_
