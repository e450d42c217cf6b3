// File: daemon/policy/plan_explainer.cc
#include "daemon/policy/plan_explainer.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "daemon/common/status_macros.h"
#include "daemon/policy/settings_resolver.h"
#include "daemon/policy/stream_planning.h"
#include "daemon/policy/stream_settings.h"

namespace ddo {
namespace {

// A dense Linear weight as the layout describes it (the runner would stream it).
bool IsFloatingWeight(const TensorEntry& tensor) {
  return IsFloatingPoint(tensor.dtype) && tensor.shape.size() == 2 && tensor.module_class == "Linear" &&
         tensor.name == tensor.module_path + ".weight";
}

// The call's settings as a resolution request: explicit overrides, DDO_PRESET the preset
// (default auto, as the seed's enable_* helpers).
SettingsRequest ResolutionOf(const std::string& component,
                             const std::map<std::string, std::string>& settings) {
  SettingsRequest resolve;
  resolve.preset = "auto";
  for (const auto& [name, value] : settings) {
    if (name == "DDO_PRESET") {
      resolve.preset = value;
    } else {
      resolve.overrides[name] = value;
    }
  }
  resolve.components.push_back(component);
  return resolve;
}

}  // namespace

absl::StatusOr<PlanExplanation> ExplainPlan(
    const std::vector<TensorEntry>& tensors, const std::string& requested_component,
    const std::map<std::string, std::string>& settings,
    const std::map<std::string, std::string>& daemon_environment, const MachineFacts& machine) {
  const std::string component = requested_component.empty() ? "model" : requested_component;
  DDO_ASSIGN_OR_RETURN(const ResolvedSettings resolved,
                       ResolveSettings(ResolutionOf(component, settings), daemon_environment,
                                       machine.platform));
  std::map<std::string, std::string> values = resolved.ValuesByName(0);
  const std::string& prefix = resolved.components[0].variable_prefix;

  PlanExplanation out;
  auto decide = [&out](std::string key, std::string value, std::string reason) {
    out.decisions.push_back({std::move(key), std::move(value), std::move(reason)});
  };
  decide("preset", resolved.effective_preset.empty() ? "none" : resolved.effective_preset,
         resolved.requested_preset == resolved.effective_preset
             ? "as requested"
             : absl::StrCat("'", resolved.requested_preset, "' resolves to it"));
  const std::string route = values[prefix + "ROUTE"];
  decide("route", route, absl::StrCat(prefix, "ROUTE, ", prefix, "GROUP_OFFLOAD, ", prefix,
                                      "DYNAMIC_OFFLOAD and DDO_EXECUTION_MODE=",
                                      values["DDO_EXECUTION_MODE"]));
  if (route == "diffusers_group_offload") {
    out.route = "diffusers_group_offload";
    auto& args = out.group_offload_args;
    const std::string type = values[prefix + "OFFLOAD_TYPE"];
    args["offload_type"] = type;
    args["use_stream"] = values[prefix + "OFFLOAD_STREAM"] == "1" ? "True" : "False";
    args["record_stream"] = values[prefix + "OFFLOAD_RECORD_STREAM"] == "1" ? "True" : "False";
    args["low_cpu_mem_usage"] = values[prefix + "OFFLOAD_LOW_CPU_MEM_USAGE"] == "1" ? "True" : "False";
    if (type == "block_level") args["num_blocks_per_group"] = values[prefix + "NUM_BLOCKS_PER_GROUP"];
    return out;
  }
  if (route != "dynamic_offload") {
    out.route = "none";
    return out;
  }
  out.route = "ddo_stream";

  std::set<std::string> streamable;
  for (const TensorEntry& tensor : tensors) {
    if (IsFloatingWeight(tensor)) streamable.insert(tensor.name);
  }
  DDO_ASSIGN_OR_RETURN(StreamSettings stream_settings, ParseStreamSettings(values));
  DDO_ASSIGN_OR_RETURN(SessionPlan plan, PlanStreamSession(tensors, streamable, std::move(stream_settings),
                                                           values, machine));
  out.decisions.insert(out.decisions.end(), plan.decisions.begin(), plan.decisions.end());
  out.resident_bytes = plan.resident_bytes;
  out.streamed_bytes = plan.streamed_bytes;
  out.ring_slots = plan.ring_slots;
  decide("device_bytes", absl::StrCat(plan.device_bytes()),
         "slab + ring that a streaming session of this plan allocates");
  if (std::optional<PlanDecisionEntry> transfer = TransferPerPass(machine, plan.streamed_bytes)) {
    out.decisions.push_back(*transfer);
  }
  return out;
}

}  // namespace ddo
