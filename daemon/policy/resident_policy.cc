// File: daemon/policy/resident_policy.cc
#include "daemon/policy/resident_policy.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "daemon/config/values.h"
#include "daemon/policy/balanced_planner.h"
#include "daemon/policy/module_blocks.h"
#include "daemon/policy/session_planner.h"

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

// The seed's balanced planner's inputs: candidates as the seed counts them (streamable weights
// above the small threshold; the "model" of the VRAM ratio is everything inside repeated
// blocks), the machine, and the DDO_* values that tune it.
BalancedInputs GatherBalancedInputs(const std::vector<TensorEntry>& tensors,
                                    const std::set<std::string>& streamable,
                                    const std::map<std::string, std::string>& values,
                                    const MachineFacts& machine, const StreamSettings& settings) {
  std::vector<std::string> paths;
  for (const TensorEntry& tensor : tensors) paths.push_back(tensor.module_path);
  const std::map<std::string, std::string> blocks = BlocksOf(paths);
  BalancedInputs in;
  for (const TensorEntry& tensor : tensors) {
    if (streamable.count(tensor.name) && tensor.byte_size > settings.small_tensor_bytes) {
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
  if (const double profile = Number(values, "DDO_PROFILE_RESIDENT_MODULE_BUDGET_GB"); profile > 0) {
    in.profile_budget_gib = profile;
  }
  if (settings.vram_budget_bytes) {
    // The session's own budget is the device it may use.
    in.total_vram_gib = in.total_vram_gib > 0
                            ? std::min(in.total_vram_gib, *settings.vram_budget_bytes / kGiB)
                            : *settings.vram_budget_bytes / kGiB;
  }
  return in;
}

// The seed's pin selection, reported beside ddod's whole-segment pinning.
void ReportPinSelection(const BalancedPlan& balanced, const BalancedInputs& in,
                        std::vector<PlanDecisionEntry>* decisions) {
  if (balanced.pin_budget_gib && balanced.pin_decision != "skip_insufficient_ram") {
    // The seed's selection of the weights to pin, among those its residents leave: reported
    // (ddod pins the whole segment, below).
    const double left_gib =
        std::max(0.0, in.candidate_weight_gib - balanced.resident_budget_gib.value_or(0));
    const bool requested = in.pin_weight_budget_gib > 0 || in.pin_weight_budget_ratio > 0 ||
                           in.max_pin_weight_budget_gib > 0;
    const PinSelection pin = SelectPinBudget(
        balanced.pin_decision == "full_pin_zero_resident",
        in.pin_weight_budget_gib > 0 ? in.pin_weight_budget_gib : *balanced.pin_budget_gib,
        in.pin_weight_budget_ratio, in.max_pin_weight_budget_gib, left_gib, requested);
    const char* kSeed = "the seed's pin selection (its 95% snap to a full pin included)";
    decisions->push_back({"resolved_pin_weight_budget_mode", pin.mode, kSeed});
    decisions->push_back({"resolved_pin_weight_budget_gb", FormatGib(pin.budget_gib), kSeed});
    decisions->push_back({"pin_weight_budget_snap_to_full", pin.snapped ? "true" : "false", kSeed});
  }
  if (balanced.pin_budget_gib) {
    decisions->push_back({"host_pinning",
                          balanced.pin_decision == "skip_insufficient_ram" ? "none" : "whole component",
                          "ddod pins a component's pool segment whole; the seed's partial pin "
                          "budget is reported above for comparison"});
  }
}

// The seed's resident budget, and its step 4 for a full pin with zero residents.
void UseSeedRule(const BalancedPlan& balanced, std::string reason, StreamSettings* settings,
                 std::vector<PlanDecisionEntry>* decisions) {
  if (balanced.resident_budget_gib) {
    settings->resident_budget_bytes = GiBToBytes(*balanced.resident_budget_gib);
  }
  decisions->push_back({"resident_budget_rule", "seed", std::move(reason)});
  if (balanced.pin_decision == "full_pin_zero_resident") {
    // The seed's step 4: the default always-resident leaves would take the headroom this
    // mode keeps for activations.
    settings->always_resident_patterns.clear();
    decisions->push_back({"auto_always_resident_decision", "offload_for_zero_resident",
                          "full pin, zero resident: the always-resident patterns are cleared"});
  }
}

// DDO_RESIDENT_BUDGET_RULE: the seed's budget, or the bandwidth rule when its plan copies less.
void ApplyBudgetRule(const std::vector<TensorEntry>& tensors,
                     const std::set<std::string>& streamable,
                     const std::map<std::string, std::string>& values,
                     const MachineFacts& machine, const BalancedInputs& in,
                     const BalancedPlan& balanced, StreamSettings* settings,
                     std::vector<PlanDecisionEntry>* decisions) {
  const double seed_budget_gib = balanced.resident_budget_gib.value_or(0);
  auto transfer = [&](double gib) {
    return machine.h2d_gbps > 0
               ? absl::StrFormat(" (%.3f s at the measured %.1f GB/s)", gib * kGiB / 1e9 / machine.h2d_gbps,
                                 machine.h2d_gbps)
               : std::string();
  };
  auto use_seed = [&](std::string reason) {
    UseSeedRule(balanced, std::move(reason), settings, decisions);
  };
  if (Text(values, "DDO_RESIDENT_BUDGET_RULE") == "seed") return use_seed("DDO_RESIDENT_BUDGET_RULE=seed");
  if (in.profile_budget_gib) {
    return use_seed("a named profile's measured budget (DDO_PROFILE_RESIDENT_MODULE_BUDGET_GB)");
  }
  if (in.total_vram_gib <= 0) {
    return use_seed("the device's VRAM is unknown (host backend): the seed's budget");
  }
  // The bandwidth rule: the session may use the device but for the larger of the seed's
  // headroom and the activation reserve (the seed's headroom is its allowance for
  // activations, which the reserve already is here: counting both would free the same room
  // twice), keeps resident all that leaves after the ring, and so copies the least per pass.
  const double ratio = in.candidate_module_gib / in.total_vram_gib;
  const double headroom = in.auto_vram_headroom_gib > 0 ? in.auto_vram_headroom_gib
                                                        : VramHeadroomGib(in.total_vram_gib, ratio);
  const double reserve_gib = settings->activation_reserve_bytes / kGiB;
  const double usable_gib = std::max(0.0, in.total_vram_gib - std::max(0.0, headroom - reserve_gib));
  StreamSettings bandwidth = *settings;
  bandwidth.vram_budget_bytes = GiBToBytes(usable_gib);
  bandwidth.resident_budget_bytes.reset();
  absl::StatusOr<SessionPlan> plan = PlanSession(tensors, streamable, bandwidth);
  if (!plan.ok()) {
    return use_seed(absl::StrCat("the bandwidth rule's ", absl::StrFormat("%.2f", usable_gib),
                                 " GiB cannot hold the ring and the reserve: ", plan.status().message()));
  }
  // Both rules are compared on the plans they would give, not on their budgets: a budget
  // counts candidates only, while a plan also keeps small and non-streamable tensors.
  StreamSettings seed = *settings;
  if (balanced.resident_budget_gib) seed.resident_budget_bytes = GiBToBytes(*balanced.resident_budget_gib);
  absl::StatusOr<SessionPlan> seed_plan = PlanSession(tensors, streamable, seed);
  const double streamed_gib = plan->streamed_bytes / kGiB;
  if (seed_plan.ok() && seed_plan->streamed_bytes <= plan->streamed_bytes) {
    const double seed_streamed_gib = seed_plan->streamed_bytes / kGiB;
    return use_seed(absl::StrFormat("the bandwidth rule would copy %.2f GiB per pass%s, no less "
                                    "than the seed's %.2f GiB%s", streamed_gib, transfer(streamed_gib),
                                    seed_streamed_gib, transfer(seed_streamed_gib)));
  }
  const std::string against =
      seed_plan.ok()
          ? absl::StrFormat("%.2f GiB%s", seed_plan->streamed_bytes / kGiB,
                            transfer(seed_plan->streamed_bytes / kGiB))
          : absl::StrCat("no plan (", seed_plan.status().message(), ")");
  *settings = bandwidth;
  decisions->push_back(
      {"resident_budget_rule", "bandwidth",
       absl::StrFormat("the session uses up to %.2f GiB (VRAM %.2f GiB - headroom %.2f GiB beyond "
                       "the %.2f GiB activation reserve) and keeps resident what the ring and the "
                       "reserve leave: %.2f GiB copied per pass%s, against %s with the seed's "
                       "%.2f GiB budget",
                       usable_gib, in.total_vram_gib, std::max(0.0, headroom - reserve_gib),
                       reserve_gib, streamed_gib, transfer(streamed_gib), against,
                       seed_budget_gib)});
}


}  // namespace

void ApplyResidentPolicy(const std::vector<TensorEntry>& tensors,
                         const std::set<std::string>& streamable,
                         const std::map<std::string, std::string>& values,
                         const MachineFacts& machine, StreamSettings* settings,
                         std::vector<PlanDecisionEntry>* decisions) {
  if (Text(values, "DDO_PROFILE_CALIBRATION") == "1") {
    // The seed's calibration baseline: zero residents, so that the measured peak is what the
    // run needs beside its streamed weights.
    settings->resident_budget_bytes = 0;
    settings->always_resident_patterns.clear();
    decisions->push_back({"profile_calibration", "zero_resident",
                          "build_profile: the baseline run keeps nothing resident that can stream"});
    return;
  }
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
  const BalancedInputs in = GatherBalancedInputs(tensors, streamable, values, machine, *settings);
  const BalancedPlan balanced = PlanBalanced(in);
  for (const PlannerDecision& decision : balanced.decisions) {
    decisions->push_back({decision.key, decision.value, "the seed's balanced planner"});
  }
  ReportPinSelection(balanced, in, decisions);
  ApplyBudgetRule(tensors, streamable, values, machine, in, balanced, settings, decisions);
}

}  // namespace ddo
