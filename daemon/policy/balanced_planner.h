// File: daemon/policy/balanced_planner.h
//
// The seed's balanced auto-budget planner (docs/seed.md, "The balanced planner"), exactly: from the
// candidate bytes, the device's VRAM and the machine's RAM it decides the resident budget
// (25 % start, the VRAM headroom table, the full-pin rule for models 4x the VRAM and more)
// and the pin budget (ratios 1.0 / 0.85 / 0.75, the RAM check), and, once residents are
// chosen, how much of the rest to pin (snapping to a full pin at 95 %). Every decision is
// recorded under the seed's planner_decisions keys. Sizes are GiB (2^30 bytes), as in every
// DDO_*_GB variable.
//
// Thread-safety: pure functions.
#ifndef DDO_DAEMON_POLICY_BALANCED_PLANNER_H_
#define DDO_DAEMON_POLICY_BALANCED_PLANNER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ddo {

struct PlannerDecision {
  std::string key;
  std::string value;
};

struct BalancedInputs {
  // Weights of patchable Linear/Embedding modules not resident, not always-resident and not
  // pinned yet; and the full size of every module matching the resident patterns.
  double candidate_weight_gib = 0;
  double candidate_module_gib = 0;
  double total_vram_gib = 0;      // 0: unknown
  double available_ram_gib = 0;   // 0: unknown
  // Settings (resolved).
  bool pin_cpu_memory = false;
  double pin_weight_budget_gib = 0;      // DDO_PIN_WEIGHT_BUDGET_GB
  double pin_weight_budget_ratio = 0;    // DDO_PIN_WEIGHT_BUDGET_RATIO
  double resident_module_budget_gib = 0; // DDO_RESIDENT_MODULE_BUDGET_GB (explicit)
  double max_pin_weight_budget_gib = 0;  // DDO_MAX_PIN_WEIGHT_BUDGET_GB
  double max_resident_module_budget_gib = 6;    // DDO_MAX_RESIDENT_MODULE_BUDGET_GB
  double auto_vram_headroom_gib = 0;            // DDO_AUTO_VRAM_HEADROOM_GB
  double system_ram_headroom_gib = 6;           // DDO_SYSTEM_RAM_HEADROOM_GB
  double full_pin_min_model_to_vram_ratio = 4;  // DDO_AUTO_FULL_PIN_MIN_MODEL_TO_VRAM_RATIO
  // A capacity profile's recommended resident budget, when one applies.
  std::optional<double> profile_budget_gib;
};

struct BalancedPlan {
  bool full_pin = false;
  // The automatic resident budget; unset when an explicit one is set or nothing is a candidate.
  std::optional<double> resident_budget_gib;
  // The automatic pin budget; unset when an explicit budget or ratio is set or nothing is a
  // candidate. 0 with pin_decision "skip_insufficient_ram".
  std::optional<double> pin_budget_gib;
  double pin_ratio = 0;
  std::string resident_decision;  // "cuda_vram_headroom", "zero_for_full_pin", ...
  std::string pin_decision;       // "budgeted", "skip_insufficient_ram", "full_pin_zero_resident", ...
  std::vector<PlannerDecision> decisions;
};

BalancedPlan PlanBalanced(const BalancedInputs& inputs);

// The headroom the automatic budget leaves on a device (the seed's table).
double VramHeadroomGib(double total_vram_gib, double model_to_vram_ratio);

struct PinSelection {
  // "snap_to_full_pin", "unlimited_full_pin" or "limited".
  std::string mode;
  double budget_gib = 0;  // what to pin (all candidates for a full pin)
  bool snapped = false;
};

// How much of the weights left after residents are chosen to pin (seed §4.4, "Selecting the
// weights to pin"). `forced_full_pin`: the zero-resident full-pin mode. `budget_gib` and
// `ratio`: the resolved budget (automatic or explicit); `requested`: whether any budget or ratio
// was asked for at all. Not called when the plan skipped pinning (skip_insufficient_ram).
PinSelection SelectPinBudget(bool forced_full_pin, double budget_gib, double ratio,
                             double max_pin_gib, double candidate_gib, bool requested);

// The seed's "%.4f" number formatting of decision values.
std::string FormatGib(double gib);

}  // namespace ddo

#endif  // DDO_DAEMON_POLICY_BALANCED_PLANNER_H_
