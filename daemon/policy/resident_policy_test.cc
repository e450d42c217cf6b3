// File: daemon/policy/resident_policy_test.cc
#include "daemon/policy/resident_policy.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "daemon/config/values.h"
#include "daemon/policy/session_planner.h"

namespace ddo {
namespace {

// `blocks` repeated blocks of two 1024 x 1024 bf16 Linears (2 MiB each): 4 MiB per block.
struct Model {
  std::vector<TensorEntry> tensors;
  std::set<std::string> streamable;
};

Model MakeModel(int blocks) {
  Model model;
  for (int b = 0; b < blocks; ++b) {
    for (const char* linear : {"to_q", "ff"}) {
      TensorEntry weight;
      weight.module_path = absl::StrCat("blocks.", b, ".", linear);
      weight.name = weight.module_path + ".weight";
      weight.dtype = DType::kBF16;
      weight.shape = {1024, 1024};
      weight.byte_size = 2u << 20;
      model.tensors.push_back(weight);
      model.streamable.insert(weight.name);
    }
  }
  return model;
}

// A device of `vram_gib` on a machine with 64 GiB of RAM available.
MachineFacts Device(double vram_gib, double h2d_gbps = 0) {
  MachineFacts machine;
  machine.total_vram_gib = vram_gib;
  machine.available_ram_gib = 64;
  machine.h2d_gbps = h2d_gbps;
  return machine;
}

std::map<std::string, std::string> Decisions(const std::vector<PlanDecisionEntry>& entries) {
  std::map<std::string, std::string> out;
  for (const PlanDecisionEntry& entry : entries) out[entry.key] = entry.value;
  return out;
}

TEST(ResidentPolicyTest, AnExplicitBudgetWins) {
  const Model model = MakeModel(8);
  StreamSettings settings;
  std::vector<PlanDecisionEntry> decisions;
  ApplyResidentPolicy(model.tensors, model.streamable,
                      {{"DDO_RESIDENT_MODULE_BUDGET_GB", "0.5"}, {"DDO_AUTO_BUDGET_POLICY", "balanced"}},
                      MachineFacts{}, &settings, &decisions);
  ASSERT_TRUE(settings.resident_budget_bytes.has_value());
  EXPECT_EQ(*settings.resident_budget_bytes, 512u << 20);
  EXPECT_EQ(Decisions(decisions).at("resident_budget_source"), "explicit");
}

TEST(ResidentPolicyTest, WithoutAPolicyNothingIsDecidedHere) {
  const Model model = MakeModel(8);
  StreamSettings settings;
  std::vector<PlanDecisionEntry> decisions;
  ApplyResidentPolicy(model.tensors, model.streamable, {}, MachineFacts{}, &settings, &decisions);
  EXPECT_FALSE(settings.resident_budget_bytes.has_value());
  EXPECT_EQ(Decisions(decisions).at("resident_budget_source"), "none");
  settings.vram_budget_bytes = 1ull << 30;
  decisions.clear();
  ApplyResidentPolicy(model.tensors, model.streamable, {}, MachineFacts{}, &settings, &decisions);
  EXPECT_EQ(Decisions(decisions).at("resident_budget_source"), "vram_budget");
}

TEST(ResidentPolicyTest, TheBalancedPlannerSizesTheBudgetFromTheDevice) {
  // 32 MiB of candidates on a 24 GiB device: the seed's rules (docs/seed.md;
  // their numbers are balanced_planner_test's) give a budget, and the session gets it.
  const Model model = MakeModel(8);
  StreamSettings settings;
  std::vector<PlanDecisionEntry> decisions;
  const MachineFacts machine = Device(24);
  ApplyResidentPolicy(model.tensors, model.streamable,
                      {{"DDO_AUTO_BUDGET_POLICY", "balanced"}, {"DDO_PIN_CPU_MEMORY", "1"},
                       {"DDO_RESIDENT_BUDGET_RULE", "seed"}},
                      machine, &settings, &decisions);
  const auto decided = Decisions(decisions);
  EXPECT_EQ(decided.at("cuda_total_vram_gb"), "24.0000");
  EXPECT_EQ(decided.at("available_system_ram_gb"), "64.0000");
  ASSERT_TRUE(settings.resident_budget_bytes.has_value());
  EXPECT_GT(*settings.resident_budget_bytes, 0u);
  EXPECT_TRUE(decided.count("auto_resident_module_decision"));
  // 32 MiB of candidates, all pinnable: the seed's selection snaps to a full pin.
  EXPECT_EQ(decided.at("resolved_pin_weight_budget_mode"), "snap_to_full_pin");
  EXPECT_EQ(decided.at("pin_weight_budget_snap_to_full"), "true");
  EXPECT_NEAR(static_cast<double>(*settings.resident_budget_bytes) / (1 << 30),
              std::stod(decided.at("auto_resident_module_budget_gb")), 1e-4)
      << "the budget is the one the planner reports";
  // The caller's RAM figure replaces the machine's.
  decisions.clear();
  ApplyResidentPolicy(model.tensors, model.streamable,
                      {{"DDO_AUTO_BUDGET_POLICY", "balanced"}, {"DDO_AVAILABLE_SYSTEM_RAM_GB", "16"},
                       {"DDO_RESIDENT_BUDGET_RULE", "seed"}},
                      machine, &settings, &decisions);
  EXPECT_EQ(Decisions(decisions).at("available_system_ram_gb"), "16.0000");
}

TEST(ResidentPolicyTest, TheBandwidthRuleKeepsResidentWhatTheHeadroomLeaves) {
  // 128 MiB of candidates; on an 8 GiB device the seed's rules keep a quarter resident, the
  // bandwidth rule all of it (what 8 GiB less the headroom, the ring and the reserve leave).
  const Model model = MakeModel(32);
  StreamSettings settings;
  std::vector<PlanDecisionEntry> decisions;
  const MachineFacts machine = Device(8, /*h2d_gbps=*/25);
  ApplyResidentPolicy(model.tensors, model.streamable, {{"DDO_AUTO_BUDGET_POLICY", "balanced"}},
                      machine, &settings, &decisions);
  const auto decided = Decisions(decisions);
  ASSERT_EQ(decided.at("resident_budget_rule"), "bandwidth");
  EXPECT_FALSE(settings.resident_budget_bytes.has_value());  // whatever the VRAM budget leaves
  ASSERT_TRUE(settings.vram_budget_bytes.has_value());
  EXPECT_LT(*settings.vram_budget_bytes, 8ull << 30);
  absl::StatusOr<SessionPlan> plan = PlanSession(model.tensors, model.streamable, settings);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->streamed_bytes, 0u);
  // The reason names both rules' bytes per pass and their time at the measured bandwidth.
  for (const PlanDecisionEntry& entry : decisions) {
    if (entry.key == "resident_budget_rule") {
      EXPECT_THAT(entry.reason, ::testing::HasSubstr("25.0 GB/s"));
    }
  }
}

TEST(ResidentPolicyTest, FullPinZeroResidentClearsTheAlwaysResidentPatterns) {
  // 128 MiB of candidates on a 24 MiB device: more than 4x the VRAM, RAM for all of it: the
  // seed pins everything, keeps nothing resident, and offloads the always-resident leaves too.
  const Model model = MakeModel(32);
  StreamSettings settings;
  settings.always_resident_patterns = {"proj_out"};
  std::vector<PlanDecisionEntry> decisions;
  const MachineFacts machine = Device(24.0 / 1024);
  ApplyResidentPolicy(model.tensors, model.streamable,
                      {{"DDO_AUTO_BUDGET_POLICY", "balanced"}, {"DDO_PIN_CPU_MEMORY", "1"},
                       {"DDO_RESIDENT_BUDGET_RULE", "seed"}},
                      machine, &settings, &decisions);
  const auto decided = Decisions(decisions);
  EXPECT_EQ(decided.at("auto_pin_weight_decision"), "full_pin_zero_resident");
  EXPECT_EQ(decided.at("auto_always_resident_decision"), "offload_for_zero_resident");
  EXPECT_TRUE(settings.always_resident_patterns.empty());
  EXPECT_EQ(settings.resident_budget_bytes.value_or(1), 0u);
}

TEST(ResidentPolicyTest, TheHeadroomAndTheActivationReserveAreNotCountedTwice) {
  // The session keeps the 2 GiB activation reserve free itself, so of a 3 GiB headroom only
  // 1 GiB more stays unused; a headroom below the reserve adds nothing.
  const Model model = MakeModel(32);
  const MachineFacts machine = Device(16);
  for (const auto& [headroom, budget_gib] : {std::pair<const char*, double>{"3", 15.0}, {"1", 16.0}}) {
    StreamSettings settings;
    std::vector<PlanDecisionEntry> decisions;
    ApplyResidentPolicy(model.tensors, model.streamable,
                        {{"DDO_AUTO_BUDGET_POLICY", "balanced"}, {"DDO_AUTO_VRAM_HEADROOM_GB", headroom}},
                        machine, &settings, &decisions);
    ASSERT_EQ(Decisions(decisions).at("resident_budget_rule"), "bandwidth") << headroom;
    ASSERT_TRUE(settings.vram_budget_bytes.has_value());
    EXPECT_EQ(*settings.vram_budget_bytes, GiBToBytes(budget_gib)) << headroom;
  }
}

TEST(ResidentPolicyTest, TheSeedsRuleServesWhenItsPlanCopiesNoMore) {
  // Every weight under the small-tensor threshold stays resident under either rule: the
  // bandwidth rule cannot copy less, so the seed's budget stays, and the reason says so.
  const Model model = MakeModel(32);
  StreamSettings settings;
  settings.small_tensor_bytes = 1ull << 30;
  std::vector<PlanDecisionEntry> decisions;
  const MachineFacts machine = Device(24);
  ApplyResidentPolicy(model.tensors, model.streamable,
                      {{"DDO_AUTO_BUDGET_POLICY", "balanced"}},
                      machine, &settings, &decisions);
  ASSERT_EQ(Decisions(decisions).at("resident_budget_rule"), "seed");
  EXPECT_TRUE(settings.resident_budget_bytes.has_value());
  for (const PlanDecisionEntry& entry : decisions) {
    if (entry.key == "resident_budget_rule") {
      EXPECT_THAT(entry.reason, ::testing::HasSubstr("no less than the seed's 0.00 GiB"));
    }
  }
}

TEST(ResidentPolicyTest, TheSeedsBudgetServesWhenTheHeadroomLeavesNoRoom) {
  // 2 GiB of VRAM: the headroom and the 2 GiB activation reserve leave nothing.
  const Model model = MakeModel(32);
  StreamSettings settings;
  std::vector<PlanDecisionEntry> decisions;
  const MachineFacts machine = Device(2);
  ApplyResidentPolicy(model.tensors, model.streamable, {{"DDO_AUTO_BUDGET_POLICY", "balanced"}},
                      machine, &settings, &decisions);
  EXPECT_EQ(Decisions(decisions).at("resident_budget_rule"), "seed");
  EXPECT_TRUE(settings.resident_budget_bytes.has_value());
  EXPECT_FALSE(settings.vram_budget_bytes.has_value());
}

}  // namespace
}  // namespace ddo
