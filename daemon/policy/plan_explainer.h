// File: daemon/policy/plan_explainer.h
//
// ExplainPlan: the whole decision for one component layout, without loading weights. The
// settings are resolved (settings_resolver), the route follows from them; for the DDO route
// the seed's balanced planner sizes the resident budget when DDO_AUTO_BUDGET_POLICY=balanced
// and no explicit budget is set, and the streaming planner (stream/session_plan) places
// units, ring and resident blocks exactly as a streaming session on that device would.
//
// Thread-safety: a pure function of its arguments.
#ifndef DDO_DAEMON_POLICY_PLAN_EXPLAINER_H_
#define DDO_DAEMON_POLICY_PLAN_EXPLAINER_H_

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "daemon/policy/resident_policy.h"
#include "daemon/policy/settings_resolver.h"
#include "ddo/v1/sessions.pb.h"

namespace ddo {


// InvalidArgument for a bad tensor table or setting (named).
absl::StatusOr<ddo::v1::PlanExplanation> ExplainPlan(
    const ddo::v1::ExplainPlanRequest& request,
    const std::map<std::string, std::string>& daemon_environment, const MachineFacts& machine);

}  // namespace ddo

#endif  // DDO_DAEMON_POLICY_PLAN_EXPLAINER_H_
