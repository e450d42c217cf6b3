// File: daemon/policy/plan_explainer.cc
#include "daemon/policy/plan_explainer.h"

#include <set>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "daemon/common/status_macros.h"
#include "daemon/config/setting_catalog.h"
#include "daemon/config/values.h"
#include "daemon/policy/resident_policy.h"
#include "daemon/store/tensor_table.h"
#include "daemon/stream/session_plan.h"

namespace ddo {
namespace {

void Decide(ddo::v1::PlanExplanation* out, std::string key, std::string value, std::string reason) {
  auto* decision = out->add_decisions();
  decision->set_key(std::move(key));
  decision->set_value(std::move(value));
  decision->set_reason(std::move(reason));
}

// A dense Linear weight as the layout describes it (the runner would stream it).
bool IsFloatingWeight(const TensorEntry& tensor) {
  return IsFloatingPoint(tensor.dtype) && tensor.shape.size() == 2 && tensor.module_class == "Linear" &&
         tensor.name == tensor.module_path + ".weight";
}

}  // namespace

absl::StatusOr<ddo::v1::PlanExplanation> ExplainPlan(
    const ddo::v1::ExplainPlanRequest& request,
    const std::map<std::string, std::string>& daemon_environment, const MachineFacts& machine) {
  DDO_ASSIGN_OR_RETURN(std::vector<TensorEntry> tensors, TensorTableFromProto(request.tensors()));
  const std::string component = request.component().empty() ? "model" : request.component();

  // Settings: the request's settings are explicit overrides; DDO_PRESET among them picks the
  // preset (default auto, as the seed's enable_* helpers).
  ddo::v1::ResolveSettingsRequest resolve;
  resolve.set_preset("auto");
  for (const auto& [name, value] : request.settings()) {
    if (name == "DDO_PRESET") {
      resolve.set_preset(value);
    } else {
      (*resolve.mutable_overrides())[name] = value;
    }
  }
  resolve.add_components(component);
  DDO_ASSIGN_OR_RETURN(ddo::v1::ResolvedSettings resolved,
                       ResolveSettings(resolve, daemon_environment, machine.platform));
  std::map<std::string, std::string> values;
  for (const auto& value : resolved.values()) values[value.name()] = value.value();
  for (const auto& value : resolved.components(0).values()) values[value.name()] = value.value();
  const std::string prefix = absl::StrCat("DDO_", ComponentPrefix(component), "_");

  ddo::v1::PlanExplanation out;
  Decide(&out, "preset", resolved.effective_preset().empty() ? "none" : resolved.effective_preset(),
         resolved.requested_preset() == resolved.effective_preset()
             ? "as requested"
             : absl::StrCat("'", resolved.requested_preset(), "' resolves to it"));
  const std::string route = values[prefix + "ROUTE"];
  Decide(&out, "route", route, absl::StrCat(prefix, "ROUTE, ", prefix, "GROUP_OFFLOAD, ",
                                            prefix, "DYNAMIC_OFFLOAD and DDO_EXECUTION_MODE=",
                                            values["DDO_EXECUTION_MODE"]));
  if (route == "diffusers_group_offload") {
    out.set_route("diffusers_group_offload");
    auto& args = *out.mutable_group_offload_args();
    const std::string type = values[prefix + "OFFLOAD_TYPE"];
    args["offload_type"] = type;
    args["use_stream"] = values[prefix + "OFFLOAD_STREAM"] == "1" ? "True" : "False";
    args["record_stream"] = values[prefix + "OFFLOAD_RECORD_STREAM"] == "1" ? "True" : "False";
    args["low_cpu_mem_usage"] = values[prefix + "OFFLOAD_LOW_CPU_MEM_USAGE"] == "1" ? "True" : "False";
    if (type == "block_level") args["num_blocks_per_group"] = values[prefix + "NUM_BLOCKS_PER_GROUP"];
    return out;
  }
  if (route != "dynamic_offload") {
    out.set_route("none");
    return out;
  }
  out.set_route("ddo_stream");

  std::set<std::string> streamable;
  for (const TensorEntry& tensor : tensors) {
    if (IsFloatingWeight(tensor)) streamable.insert(tensor.name);
  }
  absl::StatusOr<StreamSettings> stream_settings = ParseStreamSettings(
      {{"DDO_STREAM_UNIT", values["DDO_STREAM_UNIT"]},
       {"DDO_RING_SLOTS", values["DDO_RING_SLOTS"]},
       {"DDO_VRAM_BUDGET_GB", values["DDO_VRAM_BUDGET_GB"]},
       {"DDO_ACTIVATION_RESERVE_GB", values["DDO_ACTIVATION_RESERVE_GB"]},
       {"DDO_RESIDENT_MODULE_SELECTION", values["DDO_RESIDENT_MODULE_SELECTION"]},
       {"DDO_SMALL_TENSOR_THRESHOLD_KB", values["DDO_SMALL_TENSOR_THRESHOLD_KB"]},
       {"DDO_ALWAYS_RESIDENT_MODULE_PATTERNS", values["DDO_ALWAYS_RESIDENT_MODULE_PATTERNS"]}});
  if (!stream_settings.ok()) return stream_settings.status();

  std::vector<PlanDecisionEntry> policy;
  ApplyResidentPolicy(tensors, streamable, values, machine, &*stream_settings, &policy);
  for (const PlanDecisionEntry& entry : policy) Decide(&out, entry.key, entry.value, entry.reason);

  DDO_ASSIGN_OR_RETURN(SessionPlan plan, PlanSession(tensors, streamable, *stream_settings));
  for (const PlanDecisionEntry& entry : plan.decisions) Decide(&out, entry.key, entry.value, entry.reason);
  out.set_resident_bytes(plan.resident_bytes);
  out.set_streamed_bytes(plan.streamed_bytes);
  out.set_ring_slots(plan.ring_slots);
  Decide(&out, "device_bytes", absl::StrCat(plan.device_bytes()),
         "slab + ring that a streaming session of this plan allocates");
  AddTransferEstimate(machine, &out);
  return out;
}

}  // namespace ddo
