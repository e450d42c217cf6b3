// File: daemon/policy/balanced_planner_test.cc
//
// Table tests of the seed's balanced planner, including the LTX 2.3 worked example of
// docs/seed.md ("The balanced planner") with its numbers.
#include "daemon/policy/balanced_planner.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>

namespace ddo {
namespace {

std::map<std::string, std::string> Decisions(const BalancedPlan& plan) {
  std::map<std::string, std::string> out;
  for (const auto& decision : plan.decisions) out[decision.key] = decision.value;
  return out;
}

// LTX 2.3 on an 8 GB card: 24.0234 GB of candidates, one_shot_fast (pinning on, headroom 8,
// resident cap 0 = uncapped).
BalancedInputs Ltx23(double available_ram_gib) {
  BalancedInputs in;
  in.candidate_weight_gib = 24.0234;
  in.candidate_module_gib = 24.0234;
  in.total_vram_gib = 8.0;
  in.available_ram_gib = available_ram_gib;
  in.pin_cpu_memory = true;
  in.max_resident_module_budget_gib = 0;
  in.system_ram_headroom_gib = 8;
  return in;
}

TEST(BalancedPlannerTest, Ltx23OnEightGigabytesMatchesTheSeed) {
  const BalancedPlan plan = PlanBalanced(Ltx23(43.53));
  const auto decisions = Decisions(plan);
  // Ratio about 3 < 4: no full pin. 25 % = 6.006, headroom 2.0 (ratio > 2.5), target 6.0.
  EXPECT_FALSE(plan.full_pin);
  EXPECT_EQ(decisions.at("auto_model_to_vram_ratio"), "3.0029");
  EXPECT_EQ(decisions.at("auto_vram_headroom_gb"), "2.0000");
  EXPECT_EQ(decisions.at("auto_resident_module_budget_vram_target_gb"), "6.0000");
  EXPECT_EQ(decisions.at("auto_resident_module_budget_vram_cap_reason"), "cuda_vram_headroom");
  ASSERT_TRUE(plan.resident_budget_gib.has_value());
  EXPECT_DOUBLE_EQ(*plan.resident_budget_gib, 6.0);
  // Pin: 0.75 x 24.0234 = 18.01755 (the seed: "about 18.02"); RAM needed 30.0234 <= usable 35.53: budgeted.
  EXPECT_DOUBLE_EQ(plan.pin_ratio, 0.75);
  EXPECT_EQ(decisions.at("auto_pin_weight_budget_gb"), "18.0175");
  EXPECT_EQ(decisions.at("auto_required_system_ram_gb"), "30.0234");
  EXPECT_EQ(decisions.at("auto_usable_system_ram_gb"), "35.5300");
  EXPECT_EQ(plan.pin_decision, "budgeted");
  // After 11 blocks (5.5077 GB) went resident, 18.5181 GB of weights remain: 18.0175 is at
  // least 95 % of that, so everything is pinned.
  const PinSelection selection =
      SelectPinBudget(false, *plan.pin_budget_gib, 0, 0, 18.5181, /*requested=*/true);
  EXPECT_EQ(selection.mode, "snap_to_full_pin");
  EXPECT_DOUBLE_EQ(selection.budget_gib, 18.5181);
}

TEST(BalancedPlannerTest, Ltx23WithThirtyTwoGigabytesOfRamSkipsPinning) {
  const BalancedPlan plan = PlanBalanced(Ltx23(32.0));
  EXPECT_EQ(Decisions(plan).at("auto_usable_system_ram_gb"), "24.0000");
  EXPECT_EQ(plan.pin_decision, "skip_insufficient_ram");
  EXPECT_DOUBLE_EQ(*plan.pin_budget_gib, 0.0);
  EXPECT_DOUBLE_EQ(*plan.resident_budget_gib, 6.0);  // residents are still planned
}

TEST(BalancedPlannerTest, AModelFourTimesTheVramIsPinnedWholeWithNothingResident) {
  BalancedInputs in = Ltx23(64);
  in.total_vram_gib = 6.0;  // ratio 4.0039
  const BalancedPlan plan = PlanBalanced(in);
  EXPECT_TRUE(plan.full_pin);
  EXPECT_DOUBLE_EQ(*plan.resident_budget_gib, 0.0);
  EXPECT_EQ(plan.resident_decision, "zero_for_full_pin");
  EXPECT_EQ(plan.pin_decision, "full_pin_zero_resident");
  EXPECT_DOUBLE_EQ(plan.pin_ratio, 1.0);
  EXPECT_DOUBLE_EQ(*plan.pin_budget_gib, 24.0234);
  EXPECT_EQ(SelectPinBudget(true, 0, 0, 0, 24.0234, false).mode, "snap_to_full_pin");

  // The rule's variable: 0 disables it; a higher threshold too.
  in.full_pin_min_model_to_vram_ratio = 0;
  EXPECT_FALSE(PlanBalanced(in).full_pin);
  in.full_pin_min_model_to_vram_ratio = 5;
  EXPECT_FALSE(PlanBalanced(in).full_pin);
  // Not when RAM cannot hold the candidates, nor with any explicit budget.
  in = Ltx23(30);
  in.total_vram_gib = 6.0;
  EXPECT_FALSE(PlanBalanced(in).full_pin);
  in = Ltx23(64);
  in.total_vram_gib = 6.0;
  in.pin_weight_budget_ratio = 0.5;
  EXPECT_FALSE(PlanBalanced(in).full_pin);
  in.pin_weight_budget_ratio = 0;
  in.pin_cpu_memory = false;
  EXPECT_FALSE(PlanBalanced(in).full_pin);
}

TEST(BalancedPlannerTest, AProfileBudgetRidesAlongWithFullPinOnlyWhenRamAllows) {
  BalancedInputs in = Ltx23(64);
  in.total_vram_gib = 6.0;
  in.profile_budget_gib = 3.0;
  BalancedPlan plan = PlanBalanced(in);
  EXPECT_EQ(plan.resident_decision, "full_pin_profile_resident");
  EXPECT_DOUBLE_EQ(*plan.resident_budget_gib, 3.0);
  EXPECT_EQ(plan.pin_decision, "full_pin_profile_resident");

  in.available_ram_gib = 8 + 24.0234 + 1;  // holds the weights, not the profile budget too
  plan = PlanBalanced(in);
  EXPECT_EQ(plan.resident_decision, "zero_for_full_pin");
  EXPECT_EQ(Decisions(plan).at("profile_resident_module_skip_reason"), "insufficient_ram");
}

TEST(BalancedPlannerTest, TheHeadroomTable) {
  EXPECT_DOUBLE_EQ(VramHeadroomGib(8.0, 2.5), 3.0);
  EXPECT_DOUBLE_EQ(VramHeadroomGib(8.5, 2.6), 2.0);
  EXPECT_DOUBLE_EQ(VramHeadroomGib(12.0, 9), 2.5);
  EXPECT_DOUBLE_EQ(VramHeadroomGib(16.0, 1), 3.0);
  EXPECT_DOUBLE_EQ(VramHeadroomGib(24.0, 1), 3.6);
}

TEST(BalancedPlannerTest, PinRatiosFollowTheCandidateSize) {
  for (const auto& [gib, ratio] : std::vector<std::pair<double, double>>{
           {4, 1.0}, {8, 1.0}, {12, 0.85}, {16, 0.85}, {20, 0.75}}) {
    BalancedInputs in;
    in.candidate_weight_gib = gib;
    in.candidate_module_gib = gib;
    in.total_vram_gib = 24;
    in.available_ram_gib = 128;
    EXPECT_DOUBLE_EQ(PlanBalanced(in).pin_ratio, ratio) << gib;
  }
}

TEST(BalancedPlannerTest, ResidentBudgetStartsAtAQuarterAndIsCapped) {
  BalancedInputs in;
  in.candidate_weight_gib = 12;
  in.candidate_module_gib = 12;
  in.total_vram_gib = 24;  // headroom 3.6, target 20.4
  in.available_ram_gib = 64;
  EXPECT_DOUBLE_EQ(*PlanBalanced(in).resident_budget_gib, 3.0);  // 25 %
  in.max_resident_module_budget_gib = 2;
  EXPECT_DOUBLE_EQ(*PlanBalanced(in).resident_budget_gib, 2.0);
  // Candidates larger than the VRAM: at least the VRAM target.
  in.max_resident_module_budget_gib = 0;
  in.total_vram_gib = 10;  // headroom 2.5, target 7.5
  EXPECT_DOUBLE_EQ(*PlanBalanced(in).resident_budget_gib, 7.5);
  // An explicit resident budget: no automatic one.
  in.resident_module_budget_gib = 1;
  EXPECT_FALSE(PlanBalanced(in).resident_budget_gib.has_value());
  // A profile recommendation replaces the computed one (clamped to the candidates).
  in.resident_module_budget_gib = 0;
  in.profile_budget_gib = 40;
  EXPECT_DOUBLE_EQ(*PlanBalanced(in).resident_budget_gib, 12.0);
}

TEST(BalancedPlannerTest, PinSelectionModes) {
  EXPECT_EQ(SelectPinBudget(false, 5, 0, 0, 10, true).mode, "limited");
  EXPECT_DOUBLE_EQ(SelectPinBudget(false, 5, 0, 0, 10, true).budget_gib, 5);
  EXPECT_EQ(SelectPinBudget(false, 0, 0.5, 0, 10, true).budget_gib, 5);    // a ratio
  EXPECT_EQ(SelectPinBudget(false, 0, 0.5, 3, 10, true).budget_gib, 3);    // capped
  EXPECT_EQ(SelectPinBudget(false, 9.5, 0, 0, 10, true).mode, "snap_to_full_pin");
  EXPECT_EQ(SelectPinBudget(false, 0, 0, 0, 10, false).mode, "unlimited_full_pin");
}

}  // namespace
}  // namespace ddo
