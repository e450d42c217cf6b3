// File: daemon/policy/plan_explainer_test.cc
#include "daemon/policy/plan_explainer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"

namespace ddo {
namespace {

using ::testing::HasSubstr;

// A FLUX-like layout: 8 blocks of 4 bf16 Linear layers (64 MiB weights each, with biases and
// a norm), plus proj_in/proj_out. 2 GiB of block weights.
struct Layout {
  explicit Layout(std::string component_name) : component(std::move(component_name)) {
    auto add = [&](const std::string& name, std::vector<int64_t> shape, const std::string& path,
                   const std::string& cls) {
      TensorEntry entry;
      entry.name = name;
      entry.dtype = DType::kBF16;
      uint64_t count = 1;
      for (int64_t d : shape) count *= d;
      entry.shape = std::move(shape);
      entry.byte_size = 2 * count;
      entry.module_path = path;
      entry.module_class = cls;
      tensors.push_back(std::move(entry));
    };
    auto linear = [&](const std::string& path, int64_t out, int64_t in) {
      add(path + ".weight", {out, in}, path, "Linear");
      add(path + ".bias", {out}, path, "Linear");
    };
    linear("proj_in", 4096, 64);
    for (int b = 0; b < 8; ++b) {
      const std::string block = absl::StrCat("blocks.", b);
      add(block + ".norm.weight", {4096}, block + ".norm", "LayerNorm");
      for (const char* name : {"to_q", "to_k", "to_v", "to_out"}) {
        linear(absl::StrCat(block, ".attn.", name), 4096, 4096);
      }
    }
    linear("proj_out", 64, 4096);
  }

  std::string component;
  std::vector<TensorEntry> tensors;
  std::map<std::string, std::string> settings;
};

absl::StatusOr<PlanExplanation> Explain(const Layout& layout, const MachineFacts& machine) {
  return ExplainPlan(layout.tensors, layout.component, layout.settings, {}, machine);
}

std::map<std::string, std::string> Decisions(const PlanExplanation& plan) {
  std::map<std::string, std::string> out;
  for (const auto& decision : plan.decisions) out[decision.key] = decision.value;
  return out;
}

TEST(PlanExplainerTest, TheTransformerStreamsUnderTheBalancedPlanner) {
  MachineFacts machine;
  machine.total_vram_gib = 2.0;  // ratio 0.5: no full pin; 25 % of 1 GiB = 0.25 GiB
  machine.available_ram_gib = 64;
  absl::StatusOr<PlanExplanation> plan = Explain(Layout("transformer"), machine);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->route, "ddo_stream");
  const auto decisions = Decisions(*plan);
  EXPECT_EQ(decisions.at("preset"), "one_shot_fast");
  EXPECT_EQ(decisions.at("auto_budget_policy"), "balanced");
  EXPECT_EQ(decisions.at("candidate_weight_gb"), "1.0000");  // 32 x 32 MiB
  EXPECT_EQ(decisions.at("auto_resident_module_budget_gb"), "0.2501");  // norms and biases count
  // 0.25 GiB holds 2 whole blocks (128 MiB each), spread: the first and the last.
  EXPECT_THAT(decisions.at("resident_blocks"), HasSubstr("2 of 8"));
  EXPECT_THAT(decisions.at("resident_blocks"), HasSubstr("blocks.0, blocks.7"));
  EXPECT_EQ(plan->ring_slots, 8u);  // linear units
  EXPECT_EQ(plan->streamed_bytes, 24ull * (32ull << 20));
}

TEST(PlanExplainerTest, AnExplicitBudgetWinsAndBlockUnitsAreHonoured) {
  Layout layout("transformer");
  layout.settings["DDO_RESIDENT_MODULE_BUDGET_GB"] = "0.5";
  layout.settings["DDO_STREAM_UNIT"] = "block";
  absl::StatusOr<PlanExplanation> plan = Explain(layout, MachineFacts{});
  ASSERT_TRUE(plan.ok()) << plan.status();
  const auto decisions = Decisions(*plan);
  EXPECT_EQ(decisions.at("resident_budget_source"), "explicit");
  EXPECT_THAT(decisions.at("resident_blocks"), HasSubstr("4 of 8"));
  EXPECT_EQ(plan->ring_slots, 3u);
}

TEST(PlanExplainerTest, TheTextEncoderGetsDiffusersGroupOffloadArguments) {
  absl::StatusOr<PlanExplanation> plan = Explain(Layout("text_encoder"), MachineFacts{});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->route, "diffusers_group_offload");
  EXPECT_EQ(plan->group_offload_args.at("offload_type"), "leaf_level");
  EXPECT_EQ(plan->group_offload_args.at("use_stream"), "True");
  EXPECT_EQ(plan->group_offload_args.at("record_stream"), "False");
  EXPECT_EQ(plan->group_offload_args.count("num_blocks_per_group"), 0u);

  Layout off("vae");
  off.settings["DDO_PRESET"] = "off";
  EXPECT_EQ(Explain(off, MachineFacts{})->route, "none");
}

TEST(PlanExplainerTest, BadInputIsNamed) {
  // (A bad tensor table is refused where it is converted: service/tensor_proto.)
  Layout layout("transformer");
  layout.settings["DDO_STREAM_UNIT"] = "layer";
  EXPECT_THAT(Explain(layout, MachineFacts{}).status().message(), HasSubstr("DDO_STREAM_UNIT='layer'"));
  layout.settings["DDO_STREAM_UNIT"] = "block";
  layout.settings["DDO_VRAM_BUDGET_GB"] = "0.01";
  EXPECT_EQ(Explain(layout, MachineFacts{}).status().code(), absl::StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace ddo
