// File: daemon/policy/resident_policy.cc
#include "daemon/policy/resident_policy.h"

#include "absl/strings/numbers.h"
#include "daemon/config/values.h"
#include "daemon/policy/balanced_planner.h"

namespace ddo {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

double Number(const std::map<std::string, std::string>& values, const std::string& name,
              double unset = 0) {
  auto it = values.find(name);
  if (it == values.end() || it->second.empty()) return unset;
  double value = unset;
  (void)absl::SimpleAtod(it->second, &value);
  return value;
}

std::string Text(const std::map<std::string, std::string>& values, const std::string& name) {
  auto it = values.find(name);
  return it == values.end() ? "" : it->second;
}

}  // namespace

void ApplyResidentPolicy(const std::vector<TensorEntry>& tensors,
                         const std::set<std::string>& streamable,
                         const std::map<std::string, std::string>& values,
                         const MachineFacts& machine, StreamSettings* settings,
                         std::vector<PlanDecisionEntry>* decisions) {
  const double explicit_budget = Number(values, "DDO_RESIDENT_MODULE_BUDGET_GB");
  if (explicit_budget > 0) {
    settings->resident_budget_bytes = GiBToBytes(explicit_budget);
    decisions->push_back({"resident_budget_source", "explicit", "DDO_RESIDENT_MODULE_BUDGET_GB"});
    return;
  }
  if (Text(values, "DDO_AUTO_BUDGET_POLICY") != "balanced") {
    decisions->push_back({"resident_budget_source",
                          settings->vram_budget_bytes ? "vram_budget" : "none",
                          settings->vram_budget_bytes
                              ? "what DDO_VRAM_BUDGET_GB leaves after the ring and the reserve"
                              : "DDO_RESIDENT_MODULE_BUDGET_GB is 0 and DDO_AUTO_BUDGET_POLICY is off"});
    return;
  }
  // Candidates as the seed counts them: streamable weights above the small threshold; the
  // "model" of the VRAM ratio is everything inside repeated blocks.
  std::vector<std::string> paths;
  for (const TensorEntry& tensor : tensors) paths.push_back(tensor.module_path);
  const std::map<std::string, std::string> blocks = BlocksOf(paths);
  BalancedInputs in;
  for (const TensorEntry& tensor : tensors) {
    if (streamable.count(tensor.name) && tensor.byte_size > settings->small_tensor_bytes) {
      in.candidate_weight_gib += tensor.byte_size / kGiB;
    }
    if (!blocks.at(tensor.module_path).empty()) in.candidate_module_gib += tensor.byte_size / kGiB;
  }
  in.total_vram_gib = machine.total_vram_gib;
  in.available_ram_gib = Number(values, "DDO_AVAILABLE_SYSTEM_RAM_GB", machine.available_ram_gib);
  in.pin_cpu_memory = Text(values, "DDO_PIN_CPU_MEMORY") == "1";
  in.pin_weight_budget_gib = Number(values, "DDO_PIN_WEIGHT_BUDGET_GB");
  in.pin_weight_budget_ratio = Number(values, "DDO_PIN_WEIGHT_BUDGET_RATIO");
  in.max_pin_weight_budget_gib = Number(values, "DDO_MAX_PIN_WEIGHT_BUDGET_GB");
  in.max_resident_module_budget_gib =
      Number(values, "DDO_MAX_RESIDENT_MODULE_BUDGET_GB", in.max_resident_module_budget_gib);
  in.auto_vram_headroom_gib = Number(values, "DDO_AUTO_VRAM_HEADROOM_GB");
  in.system_ram_headroom_gib =
      Number(values, "DDO_SYSTEM_RAM_HEADROOM_GB", in.system_ram_headroom_gib);
  in.full_pin_min_model_to_vram_ratio = Number(
      values, "DDO_AUTO_FULL_PIN_MIN_MODEL_TO_VRAM_RATIO", in.full_pin_min_model_to_vram_ratio);
  const BalancedPlan balanced = PlanBalanced(in);
  for (const PlannerDecision& decision : balanced.decisions) {
    decisions->push_back({decision.key, decision.value, "the seed's balanced planner"});
  }
  if (balanced.resident_budget_gib) {
    settings->resident_budget_bytes = GiBToBytes(*balanced.resident_budget_gib);
  }
  if (balanced.pin_budget_gib) {
    decisions->push_back({"host_pinning",
                          balanced.pin_decision == "skip_insufficient_ram" ? "none" : "whole component",
                          "ddod pins a component's pool segment whole; the seed's partial pin "
                          "budget is reported above for comparison"});
  }
}

}  // namespace ddo
