// File: daemon/policy/resident_policy.h
//
// How much of a component a streaming session keeps resident when the caller did not say:
// an explicit DDO_RESIDENT_MODULE_BUDGET_GB wins; otherwise, with DDO_AUTO_BUDGET_POLICY=
// balanced, the seed's balanced planner runs (docs/seed.md) and, on a GPU whose
// VRAM is known, the bandwidth rule (DDO_RESIDENT_BUDGET_RULE=bandwidth, the default) keeps
// resident everything the seed's VRAM headroom leaves after the ring and the activation
// reserve: every byte kept resident is a byte not copied over PCIe in each pass, so a pass
// cannot be slower, and the seed's cap (DDO_MAX_RESIDENT_MODULE_BUDGET_GB) would leave VRAM
// idle. Both budgets and their transfer time per pass at the measured bandwidth are recorded.
// A DDO_VRAM_BUDGET_GB caps either. ExplainPlan and Attach share this function, so the
// explanation is the decision a session gets.
//
// Thread-safety: a pure function of its arguments.
#ifndef DDO_DAEMON_POLICY_RESIDENT_POLICY_H_
#define DDO_DAEMON_POLICY_RESIDENT_POLICY_H_

#include <map>
#include <set>
#include <string>
#include <vector>

#include "daemon/policy/settings_resolver.h"
#include "daemon/policy/stream_settings.h"
#include "daemon/layout/tensor_table.h"
#include "daemon/layout/session_plan.h"

namespace ddo {

// What ddod knows of the machine for a plan.
struct MachineFacts {
  PlatformFacts platform;
  double total_vram_gib = 0;     // the session's device; 0: unknown (host backend)
  double available_ram_gib = 0;  // 0: unknown
  double h2d_gbps = 0;           // the device's measured pinned H2D bandwidth; 0: unknown
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
