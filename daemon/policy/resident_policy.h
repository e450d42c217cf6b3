// File: daemon/policy/resident_policy.h
//
// How much of a component a streaming session keeps resident when the caller did not say:
// an explicit DDO_RESIDENT_MODULE_BUDGET_GB wins; otherwise, with DDO_AUTO_BUDGET_POLICY=
// balanced, the seed's balanced planner sizes it from the device's VRAM, the host's RAM and
// the component (research/seed-ddo.md §4.4). A DDO_VRAM_BUDGET_GB caps either (the session
// planner keeps slab + ring + activation reserve under it). ExplainPlan and Attach share this
// function, so the explanation is the decision a session gets.
//
// Thread-safety: a pure function of its arguments.
#ifndef DDO_DAEMON_POLICY_RESIDENT_POLICY_H_
#define DDO_DAEMON_POLICY_RESIDENT_POLICY_H_

#include <map>
#include <set>
#include <string>
#include <vector>

#include "daemon/policy/settings_resolver.h"
#include "daemon/store/tensor_table.h"
#include "daemon/stream/session_plan.h"

namespace ddo {

// What ddod knows of the machine for a plan.
struct MachineFacts {
  PlatformFacts platform;
  double total_vram_gib = 0;     // the session's device; 0: unknown (host backend)
  double available_ram_gib = 0;  // 0: unknown
};

// Sets settings->resident_budget_bytes from `values` (resolved DDO_* values by name; names
// that are absent count as unset) and appends the decisions, each with its reason.
void ApplyResidentPolicy(const std::vector<TensorEntry>& tensors,
                         const std::set<std::string>& streamable,
                         const std::map<std::string, std::string>& values,
                         const MachineFacts& machine, StreamSettings* settings,
                         std::vector<PlanDecisionEntry>* decisions);

}  // namespace ddo

#endif  // DDO_DAEMON_POLICY_RESIDENT_POLICY_H_
