// File: daemon/policy/stream_planning.cc
#include "daemon/policy/stream_planning.h"

#include "absl/strings/str_format.h"
#include "daemon/common/status_macros.h"
#include "daemon/policy/session_planner.h"

namespace ddo {

absl::StatusOr<SessionPlan> PlanStreamSession(const std::vector<TensorEntry>& tensors,
                                              const std::set<std::string>& streamable,
                                              StreamSettings settings,
                                              const std::map<std::string, std::string>& values,
                                              const MachineFacts& machine,
                                              const WeightRows& rows) {
  std::vector<PlanDecisionEntry> policy_decisions;
  ApplyResidentPolicy(tensors, streamable, values, machine, &settings, &policy_decisions);
  DDO_ASSIGN_OR_RETURN(SessionPlan plan, PlanSession(tensors, streamable, settings, rows));
  plan.decisions.insert(plan.decisions.begin(), policy_decisions.begin(), policy_decisions.end());
  return plan;
}

std::optional<PlanDecisionEntry> TransferPerPass(const MachineFacts& machine,
                                                 uint64_t streamed_bytes) {
  if (machine.h2d_gbps <= 0) return std::nullopt;
  return PlanDecisionEntry{
      "transfer_per_pass", absl::StrFormat("%.3f s", streamed_bytes / 1e9 / machine.h2d_gbps),
      absl::StrFormat("streamed bytes per pass at the device's measured pinned H2D bandwidth, "
                      "%.1f GB/s: the least a pass can take, however fast the compute",
                      machine.h2d_gbps)};
}

}  // namespace ddo
