// File: daemon/policy/balanced_planner.cc
#include "daemon/policy/balanced_planner.h"

#include <algorithm>

#include "absl/strings/str_format.h"

namespace ddo {
namespace {

constexpr double kStartFraction = 0.25;
constexpr double kSnapToFullPin = 0.95;

}  // namespace

std::string FormatGib(double gib) { return absl::StrFormat("%.4f", gib); }

double VramHeadroomGib(double total_vram_gib, double model_to_vram_ratio) {
  if (total_vram_gib <= 8.5) return model_to_vram_ratio <= 2.5 ? 3.0 : 2.0;
  if (total_vram_gib <= 12.5) return 2.5;
  return std::max(3.0, 0.15 * total_vram_gib);
}

namespace {

void Decide(BalancedPlan& plan, std::string key, std::string value) {
  plan.decisions.push_back({std::move(key), std::move(value)});
}

// The resident budget (the seed's rules, in its order): a quarter of the candidates to start,
// raised toward the VRAM target when the model outgrows VRAM, capped by the target, a profile's
// measured budget or DDO_MAX_RESIDENT_MODULE_BUDGET_GB; zero (or the profile's) on a full pin.
void DecideResidentBudget(const BalancedInputs& in, double ratio, double usable_ram,
                          std::optional<double> profile_budget, BalancedPlan& plan) {
  auto decide = [&plan](std::string key, std::string value) {
    Decide(plan, std::move(key), std::move(value));
  };
  if (in.resident_module_budget_gib == 0 && in.candidate_module_gib > 0) {
    if (!plan.full_pin) {
      double budget = kStartFraction * in.candidate_module_gib;
      if (in.total_vram_gib > 0) {
        const double headroom = in.auto_vram_headroom_gib > 0
                                    ? in.auto_vram_headroom_gib
                                    : VramHeadroomGib(in.total_vram_gib, ratio);
        const double target = std::max(1.0, in.total_vram_gib - headroom);
        decide("auto_vram_headroom_gb", FormatGib(headroom));
        decide("auto_resident_module_budget_vram_target_gb", FormatGib(target));
        if (in.candidate_module_gib > in.total_vram_gib) {
          budget = std::max(budget, std::min(target, in.candidate_module_gib));
        }
        if (budget > target) {
          budget = target;
          decide("auto_resident_module_budget_vram_cap_gb", FormatGib(target));
          decide("auto_resident_module_budget_vram_cap_reason", "cuda_vram_headroom");
        }
        plan.resident_decision = "cuda_vram_headroom";
      } else {
        plan.resident_decision = "start_fraction";
      }
      if (profile_budget) {
        budget = *profile_budget;
        plan.resident_decision = "profile_recommendation";
      }
      if (in.max_resident_module_budget_gib > 0) {
        budget = std::min(budget, in.max_resident_module_budget_gib);
      }
      plan.resident_budget_gib = budget;
    } else if (profile_budget && usable_ram >= in.candidate_weight_gib + *profile_budget) {
      plan.resident_budget_gib = *profile_budget;
      plan.resident_decision = "full_pin_profile_resident";
    } else {
      plan.resident_budget_gib = 0;
      plan.resident_decision = "zero_for_full_pin";
      if (profile_budget) decide("profile_resident_module_skip_reason", "insufficient_ram");
    }
    decide("auto_resident_module_budget_gb", FormatGib(*plan.resident_budget_gib));
    decide("auto_resident_module_decision", plan.resident_decision);
  }

}

// The pin budget: the whole candidates on a full pin, else 100/85/75% by size; none when RAM
// cannot hold the candidates and the residents beside the headroom.
void DecidePinBudget(const BalancedInputs& in, double usable_ram, BalancedPlan& plan) {
  auto decide = [&plan](std::string key, std::string value) {
    Decide(plan, std::move(key), std::move(value));
  };
  if (in.pin_weight_budget_gib == 0 && in.pin_weight_budget_ratio == 0 &&
      in.candidate_weight_gib > 0) {
    if (plan.full_pin) {
      plan.pin_ratio = 1.0;
      plan.pin_decision = plan.resident_decision == "full_pin_profile_resident"
                              ? "full_pin_profile_resident"
                              : "full_pin_zero_resident";
    } else {
      plan.pin_ratio = in.candidate_weight_gib <= 8 ? 1.0 : in.candidate_weight_gib <= 16 ? 0.85 : 0.75;
      plan.pin_decision = "budgeted";
    }
    double budget = plan.pin_ratio * in.candidate_weight_gib;
    if (in.max_pin_weight_budget_gib > 0) budget = std::min(budget, in.max_pin_weight_budget_gib);
    if (in.available_ram_gib > 0) {
      const double required = in.candidate_weight_gib + plan.resident_budget_gib.value_or(in.resident_module_budget_gib);
      decide("auto_required_system_ram_gb", FormatGib(required));
      if (usable_ram < required) {
        budget = 0;
        plan.pin_decision = "skip_insufficient_ram";
      }
    }
    plan.pin_budget_gib = budget;
    decide("auto_pin_weight_budget_ratio", FormatGib(plan.pin_ratio));
    decide("auto_pin_weight_budget_gb", FormatGib(budget));
    decide("auto_pin_weight_decision", plan.pin_decision);
  }
}

}  // namespace

BalancedPlan PlanBalanced(const BalancedInputs& in) {
  BalancedPlan plan;
  auto decide = [&plan](std::string key, std::string value) {
    Decide(plan, std::move(key), std::move(value));
  };
  const double ratio =
      in.total_vram_gib > 0 ? in.candidate_module_gib / in.total_vram_gib : 0.0;
  const double usable_ram = std::max(0.0, in.available_ram_gib - in.system_ram_headroom_gib);
  decide("auto_budget_policy", "balanced");
  decide("candidate_weight_gb", FormatGib(in.candidate_weight_gib));
  decide("candidate_resident_module_gb", FormatGib(in.candidate_module_gib));
  decide("available_system_ram_gb", FormatGib(in.available_ram_gib));
  decide("system_ram_headroom_gb", FormatGib(in.system_ram_headroom_gib));
  decide("cuda_total_vram_gb", FormatGib(in.total_vram_gib));
  decide("auto_model_to_vram_ratio", FormatGib(ratio));
  decide("auto_usable_system_ram_gb", FormatGib(usable_ram));
  decide("auto_full_pin_min_model_to_vram_ratio", FormatGib(in.full_pin_min_model_to_vram_ratio));
  if (in.profile_budget_gib) {
    decide("profile_resident_module_budget_requested_gb", FormatGib(*in.profile_budget_gib));
  }

  // The full-pin rule: pin everything, keep nothing resident, for models far larger than VRAM
  // when RAM holds them.
  plan.full_pin = in.pin_cpu_memory && in.pin_weight_budget_gib == 0 &&
                  in.pin_weight_budget_ratio == 0 && in.resident_module_budget_gib == 0 &&
                  in.max_pin_weight_budget_gib == 0 && in.available_ram_gib > 0 &&
                  in.candidate_weight_gib > 0 && usable_ram >= in.candidate_weight_gib &&
                  in.full_pin_min_model_to_vram_ratio > 0 &&
                  ratio >= in.full_pin_min_model_to_vram_ratio;
  std::optional<double> profile_budget;
  if (in.profile_budget_gib) {
    profile_budget = std::min(*in.profile_budget_gib, in.candidate_module_gib);
  }

  DecideResidentBudget(in, ratio, usable_ram, profile_budget, plan);
  DecidePinBudget(in, usable_ram, plan);
  return plan;
}

PinSelection SelectPinBudget(bool forced_full_pin, double budget_gib, double ratio,
                             double max_pin_gib, double candidate_gib, bool requested) {
  PinSelection selection;
  if (forced_full_pin) {
    return {"snap_to_full_pin", candidate_gib, true};
  }
  double budget = budget_gib;
  if (budget <= 0 && ratio > 0) budget = ratio * candidate_gib;
  if (max_pin_gib > 0 && (budget <= 0 || budget > max_pin_gib)) budget = max_pin_gib;
  if (budget > 0 && candidate_gib > 0 && budget >= kSnapToFullPin * candidate_gib) {
    return {"snap_to_full_pin", candidate_gib, true};
  }
  if (budget <= 0) {
    return {requested ? "snap_to_full_pin" : "unlimited_full_pin", candidate_gib, requested};
  }
  return {"limited", budget, false};
}

}  // namespace ddo
