// File: daemon/policy/session_planner_test.cc
#include "daemon/policy/session_planner.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"

namespace ddo {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TensorEntry Tensor(std::string name, std::vector<int64_t> shape, DType dtype = DType::kBF16) {
  TensorEntry entry;
  entry.name = std::move(name);
  entry.dtype = dtype;
  entry.shape = std::move(shape);
  uint64_t count = 1;
  for (int64_t d : entry.shape) count *= static_cast<uint64_t>(d);
  entry.byte_size = count * (dtype == DType::kF32 ? 4 : 2);
  return entry;
}

// proj_in, `blocks` repeated blocks with two Linears (+ a nested ff.net.0/ff.net.2 pair), and
// proj_out. Linear weights are 1024 x 1024 bf16 (2 MiB).
struct Model {
  std::vector<TensorEntry> tensors;
  std::set<std::string> streamable;
};

Model MakeModel(int blocks) {
  Model model;
  auto linear = [&](const std::string& path) {
    model.tensors.push_back(Tensor(path + ".weight", {1024, 1024}));
    model.tensors.push_back(Tensor(path + ".bias", {1024}));
    model.streamable.insert(path + ".weight");
  };
  linear("proj_in");
  for (int b = 0; b < blocks; ++b) {
    const std::string block = absl::StrCat("blocks.", b);
    model.tensors.push_back(Tensor(block + ".norm.weight", {1024}));
    linear(block + ".attn.to_q");
    linear(block + ".ff.net.0");
    linear(block + ".ff.net.2");
  }
  linear("proj_out");
  return model;
}

StreamSettings Settings(std::map<std::string, std::string> values = {}) {
  absl::StatusOr<StreamSettings> settings = ParseStreamSettings(values);
  EXPECT_TRUE(settings.ok()) << settings.status();
  return *settings;
}

std::vector<std::string> UnitNames(const SessionPlan& plan) {
  std::vector<std::string> names;
  for (const StreamUnit& unit : plan.units) names.push_back(unit.name);
  return names;
}

TEST(SessionPlannerTest, LinearUnitsSkipAlwaysResidentAndKeepTheRestResident) {
  const Model model = MakeModel(2);
  absl::StatusOr<SessionPlan> plan = PlanSession(model.tensors, model.streamable, Settings());
  ASSERT_TRUE(plan.ok()) << plan.status();
  // proj_in and proj_out match the default always-resident pattern.
  EXPECT_THAT(UnitNames(*plan),
              ElementsAre("blocks.0.attn.to_q", "blocks.0.ff.net.0", "blocks.0.ff.net.2",
                          "blocks.1.attn.to_q", "blocks.1.ff.net.0", "blocks.1.ff.net.2"));
  EXPECT_EQ(plan->slot_bytes, 2u << 20);
  EXPECT_EQ(plan->ring_slots, 8u);
  EXPECT_EQ(plan->streamed_bytes, 6u * (2u << 20));
  // Biases, norms, proj_in and proj_out weights are in the slab, 256-byte aligned.
  EXPECT_EQ(plan->resident.size(), model.tensors.size() - 6);
  for (const PlannedTensor& tensor : plan->resident) EXPECT_EQ(tensor.offset % 256, 0u);
  EXPECT_EQ(plan->resident_bytes + plan->streamed_bytes, [&] {
    uint64_t total = 0;
    for (const auto& t : model.tensors) total += t.byte_size;
    return total;
  }());
}

TEST(SessionPlannerTest, BlockUnitsUseTheOutermostRepeatedModule) {
  const Model model = MakeModel(3);
  absl::StatusOr<SessionPlan> plan =
      PlanSession(model.tensors, model.streamable, Settings({{"DDO_STREAM_UNIT", "block"}}));
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_THAT(UnitNames(*plan), ElementsAre("blocks.0", "blocks.1", "blocks.2"));
  EXPECT_EQ(plan->units[0].tensors.size(), 3u);
  EXPECT_EQ(plan->slot_bytes, 3u * (2u << 20));
  EXPECT_EQ(plan->ring_slots, 3u);
}

TEST(SessionPlannerTest, SmallWeightsStayResident) {
  const Model model = MakeModel(2);
  absl::StatusOr<SessionPlan> plan = PlanSession(
      model.tensors, model.streamable, Settings({{"DDO_SMALL_TENSOR_THRESHOLD_KB", "4096"}}));
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_TRUE(plan->units.empty());
  EXPECT_EQ(plan->ring_slots, 0u);
  EXPECT_EQ(plan->ring_bytes(), 0u);
}

TEST(SessionPlannerTest, ResidentBudgetSpreadsWholeBlocksEvenly) {
  const Model model = MakeModel(10);
  const uint64_t block = 3u * (2u << 20);
  absl::StatusOr<SessionPlan> plan = PlanSession(
      model.tensors, model.streamable,
      Settings({{"DDO_RESIDENT_MODULE_BUDGET_GB", absl::StrCat(3.5 * block / (1 << 30))}}));
  ASSERT_TRUE(plan.ok()) << plan.status();
  std::set<std::string> streamed_blocks;
  for (const StreamUnit& unit : plan->units) streamed_blocks.insert(unit.name.substr(0, 8));
  // Blocks 0, 5 (round(4.5)) and 9 are resident.
  EXPECT_EQ(streamed_blocks.count("blocks.0"), 0u);
  EXPECT_EQ(streamed_blocks.count("blocks.9"), 0u);
  EXPECT_EQ(plan->units.size(), 7u * 3);
}

TEST(SessionPlannerTest, VramBudgetDecidesTheResidentBlocks) {
  const Model model = MakeModel(10);
  // Mandatory resident ~4 MiB + ring 5 x 2 MiB + reserve 0 = ~14 MiB; leave room for 2 blocks.
  absl::StatusOr<SessionPlan> plan =
      PlanSession(model.tensors, model.streamable,
                  Settings({{"DDO_VRAM_BUDGET_GB", absl::StrCat(28.5 / 1024)},
                            {"DDO_ACTIVATION_RESERVE_GB", "0"},
                            {"DDO_RING_SLOTS", "4"}}));
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->units.size(), 8u * 3);
  EXPECT_LE(plan->device_bytes(), static_cast<uint64_t>(28.5 * (1 << 20)));
}

TEST(SessionPlannerTest, ABudgetTooSmallForTheDefaultRingStreamsWithAShorterOne) {
  const Model model = MakeModel(4);
  // Resident tensors ~4 MiB + the default ring (8 + 1) x 2 MiB do not fit in 12 MiB; a ring
  // of 3 + 1 does.
  const double budget_mib = 12;
  absl::StatusOr<SessionPlan> plan =
      PlanSession(model.tensors, model.streamable,
                  Settings({{"DDO_VRAM_BUDGET_GB", absl::StrCat(budget_mib / 1024)},
                            {"DDO_ACTIVATION_RESERVE_GB", "0"}}));
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_FALSE(plan->units.empty());
  EXPECT_GE(plan->ring_slots, 2u);
  EXPECT_LE(plan->device_bytes(), static_cast<uint64_t>(budget_mib * (1 << 20)));
  bool explained = false;
  for (const PlanDecisionEntry& decision : plan->decisions) {
    if (decision.key == "ring_slots") explained = true;
  }
  EXPECT_TRUE(explained) << "the shorter ring is a recorded decision";

  // An explicit DDO_RING_SLOTS is kept as asked, and refused when it does not fit.
  plan = PlanSession(model.tensors, model.streamable,
                     Settings({{"DDO_VRAM_BUDGET_GB", absl::StrCat(budget_mib / 1024)},
                               {"DDO_ACTIVATION_RESERVE_GB", "0"},
                               {"DDO_RING_SLOTS", "8"}}));
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kResourceExhausted);
}

TEST(SessionPlannerTest, VramBudgetTooSmallIsResourceExhausted) {
  const Model model = MakeModel(4);
  absl::StatusOr<SessionPlan> plan = PlanSession(
      model.tensors, model.streamable,
      Settings({{"DDO_VRAM_BUDGET_GB", "0.001"}, {"DDO_ACTIVATION_RESERVE_GB", "0"}}));
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(plan.status().message(), HasSubstr("cannot hold"));
}

TEST(SessionPlannerTest, StreamableMustBeATwoDimensionalFloatingWeight) {
  Model model = MakeModel(1);
  model.streamable.insert("blocks.0.attn.to_q.bias");
  absl::StatusOr<SessionPlan> plan = PlanSession(model.tensors, model.streamable, Settings());
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(plan.status().message(), HasSubstr("blocks.0.attn.to_q.bias"));

  model = MakeModel(1);
  model.streamable.insert("nope.weight");
  EXPECT_THAT(PlanSession(model.tensors, model.streamable, Settings()).status().message(),
              HasSubstr("not in the component"));
}

TEST(SessionPlannerTest, SignatureFollowsTheUnits) {
  const Model model = MakeModel(2);
  auto linear = PlanSession(model.tensors, model.streamable, Settings());
  auto again = PlanSession(model.tensors, model.streamable, Settings());
  auto block = PlanSession(model.tensors, model.streamable, Settings({{"DDO_STREAM_UNIT", "block"}}));
  ASSERT_TRUE(linear.ok() && again.ok() && block.ok());
  EXPECT_EQ(linear->signature, again->signature);
  EXPECT_NE(linear->signature, block->signature);
}

TEST(SessionPlannerTest, CatastrophicPatternsAreMatchedInLinearTime) {
  // (x+x+)+y against long paths: std::regex took minutes per path; RE2 is linear.
  std::vector<TensorEntry> tensors;
  std::set<std::string> streamable;
  for (int i = 0; i < 8; ++i) {
    const std::string path = absl::StrCat(std::string(1000, 'x'), i);
    tensors.push_back(Tensor(path + ".weight", {1024, 1024}));
    streamable.insert(path + ".weight");
  }
  const StreamSettings settings = Settings({{"DDO_SMALL_TENSOR_THRESHOLD_KB", "0"},
                                            {"DDO_ALWAYS_RESIDENT_MODULE_PATTERNS", "(x+x+)+y"},
                                            {"DDO_RESIDENT_MODULE_PATTERNS", "(x+x+)+y,auto"},
                                            {"DDO_RESIDENT_MODULE_BUDGET_GB", "1"}});
  absl::StatusOr<SessionPlan> plan = PlanSession(tensors, streamable, settings);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->units.size(), 8u);
}

TEST(SessionPlannerTest, HugeModulePathIsRefusedNotMatched) {
  // One ExplainPlan call with a long module path crashed ddod (std::regex's recursion).
  const std::string path(1 << 20, 'a');
  std::vector<TensorEntry> tensors = {Tensor(path + ".weight", {1024, 1024})};
  absl::StatusOr<SessionPlan> plan = PlanSession(
      tensors, {path + ".weight"},
      Settings({{"DDO_SMALL_TENSOR_THRESHOLD_KB", "0"},
                {"DDO_ALWAYS_RESIDENT_MODULE_PATTERNS", "(a|aa)*b"}}));
  ASSERT_FALSE(plan.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(plan.status()));
  EXPECT_THAT(plan.status().message(), HasSubstr("at most 1024"));
  EXPECT_LT(plan.status().message().size(), 300u);
  // A non-streamable tensor with a long name is never matched, so it is fine: resident.
  tensors.push_back(Tensor("proj.weight", {1024, 1024}));
  plan = PlanSession(tensors, {"proj.weight"}, Settings({{"DDO_SMALL_TENSOR_THRESHOLD_KB", "0"}}));
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->resident.size(), 1u);
}

TEST(SessionPlannerTest, AComponentThatIsOneLinearStreamsItsWeight) {
  std::vector<TensorEntry> tensors = {Tensor("weight", {1024, 1024}), Tensor("bias", {1024})};
  absl::StatusOr<SessionPlan> plan = PlanSession(tensors, {"weight"}, Settings());
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->units.size(), 1u);
  EXPECT_EQ(plan->units[0].name, "");
}

TEST(SessionPlannerTest, ResidentModulePatternsChooseWhatTheBudgetMayKeep) {
  // Two repeated groups: 4 large blocks ("blocks", 3 x 2 MiB streamable each) and 6 small "singles"
  // (1 x 2 MiB each). The budget holds 6 MiB.
  Model model = MakeModel(4);
  for (int b = 0; b < 6; ++b) {
    const std::string path = absl::StrCat("singles.", b, ".proj");
    model.tensors.push_back(Tensor(path + ".weight", {1024, 1024}));
    model.streamable.insert(path + ".weight");
  }
  auto resident_decision = [&](std::map<std::string, std::string> values) {
    values["DDO_RESIDENT_MODULE_BUDGET_GB"] = absl::StrCat(6.0 / 1024);
    absl::StatusOr<SessionPlan> plan = PlanSession(model.tensors, model.streamable, Settings(values));
    EXPECT_TRUE(plan.ok()) << plan.status();
    std::map<std::string, std::string> decided;
    for (const auto& d : plan->decisions) decided[d.key] = d.value;
    return decided;
  };
  // Not sent: every repeated block is a candidate; spread picks from both groups in order.
  EXPECT_THAT(resident_decision({})["resident_module_patterns"], HasSubstr("every repeated block"));
  // "auto": the seed's inferred pattern, the group with the most bytes (blocks: 24 MiB against
  // 12 MiB): one of its 6 MiB blocks fits.
  auto decided = resident_decision({{"DDO_RESIDENT_MODULE_PATTERNS", "auto"}});
  EXPECT_EQ(decided["resident_module_patterns"], "^blocks\\.\\d+$");
  EXPECT_THAT(decided["resident_blocks"], HasSubstr("1 of 4"));
  // An explicit regex: only the singles; three fit.
  decided = resident_decision({{"DDO_RESIDENT_MODULE_PATTERNS", "^singles\\.\\d+$"}});
  EXPECT_THAT(decided["resident_blocks"], HasSubstr("3 of 6"));
  // A pattern can name a whole subtree: "singles" keeps every single or none (12 MiB > 6).
  decided = resident_decision({{"DDO_RESIDENT_MODULE_PATTERNS", "^singles$"}});
  EXPECT_THAT(decided["resident_blocks"], HasSubstr("0 of 1"));
  EXPECT_FALSE(ParseStreamSettings({{"DDO_RESIDENT_MODULE_PATTERNS", "(("}}).ok());
}

// What a learned forward reports: `rows` for every Linear of every block, `mod_rows` for
// blocks.N.attn.to_q (a stand-in for a modulation Linear that sees one row).
WeightRows LearnedRows(int blocks, uint64_t rows, uint64_t mod_rows) {
  WeightRows learned;
  for (int b = 0; b < blocks; ++b) {
    const std::string block = absl::StrCat("blocks.", b);
    learned[block + ".attn.to_q.weight"] = mod_rows;
    learned[block + ".ff.net.0.weight"] = rows;
    learned[block + ".ff.net.2.weight"] = rows;
  }
  return learned;
}

bool IsResident(const SessionPlan& plan, const std::vector<TensorEntry>& tensors,
                const std::string& name) {
  for (const PlannedTensor& placed : plan.resident) {
    if (tensors[placed.table_index].name == name) return true;
  }
  return false;
}

std::string Decision(const SessionPlan& plan, const std::string& key) {
  for (const PlanDecisionEntry& entry : plan.decisions) {
    if (entry.key == key) return entry.value + " | " + entry.reason;
  }
  return "";
}

TEST(SessionPlannerTest, LearnedRowsKeepTheWeightsWithTheLeastComputePerByte) {
  const Model model = MakeModel(4);
  // Room for four 2 MiB weights: whole blocks (6 MiB) would fit one.
  const StreamSettings settings =
      Settings({{"DDO_RESIDENT_MODULE_BUDGET_GB", absl::StrCat(8.5 / 1024)}});
  absl::StatusOr<SessionPlan> plan =
      PlanSession(model.tensors, model.streamable, settings, LearnedRows(4, 4096, 1));
  ASSERT_TRUE(plan.ok()) << plan.status();
  // Every block's one-row Linear stays; every 4096-row Linear streams.
  for (int b = 0; b < 4; ++b) {
    const std::string block = absl::StrCat("blocks.", b);
    EXPECT_TRUE(IsResident(*plan, model.tensors, block + ".attn.to_q.weight")) << block;
    EXPECT_FALSE(IsResident(*plan, model.tensors, block + ".ff.net.0.weight")) << block;
  }
  EXPECT_EQ(plan->streamed_bytes, 8u * (2u << 20));
  EXPECT_THAT(Decision(*plan, "resident_weights"), HasSubstr("4 of 12 weights"));
  EXPECT_THAT(Decision(*plan, "resident_weights"), HasSubstr("least compute per byte"));
}

TEST(SessionPlannerTest, WithoutLearnedRowsAutoSpreadsWholeBlocksAsTheSeedDoes) {
  const Model model = MakeModel(4);
  const StreamSettings settings =
      Settings({{"DDO_RESIDENT_MODULE_BUDGET_GB", absl::StrCat(8.5 / 1024)}});
  absl::StatusOr<SessionPlan> plan = PlanSession(model.tensors, model.streamable, settings);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_THAT(Decision(*plan, "resident_selection"), HasSubstr("no forward of this component"));
  EXPECT_THAT(Decision(*plan, "resident_blocks"), HasSubstr("spread evenly"));
  EXPECT_EQ(Decision(*plan, "resident_weights"), "");
}

TEST(SessionPlannerTest, AnExplicitBlockSelectionIgnoresLearnedRows) {
  const Model model = MakeModel(4);
  const StreamSettings settings =
      Settings({{"DDO_RESIDENT_MODULE_BUDGET_GB", absl::StrCat(8.5 / 1024)},
                {"DDO_RESIDENT_MODULE_SELECTION", "first"}});
  absl::StatusOr<SessionPlan> plan =
      PlanSession(model.tensors, model.streamable, settings, LearnedRows(4, 4096, 1));
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_THAT(Decision(*plan, "resident_blocks"), HasSubstr("blocks.0"));
  EXPECT_FALSE(IsResident(*plan, model.tensors, "blocks.1.attn.to_q.weight"));
}

TEST(SessionPlannerTest, WeightsTheLearnedForwardNeverCalledAreNotKept) {
  const Model model = MakeModel(2);
  WeightRows rows = {{"blocks.0.ff.net.0.weight", 4096}};  // nothing else was called
  absl::StatusOr<SessionPlan> plan = PlanSession(
      model.tensors, model.streamable,
      Settings({{"DDO_RESIDENT_MODULE_BUDGET_GB", "1"}, {"DDO_RESIDENT_MODULE_SELECTION", "compute"}}),
      rows);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_TRUE(IsResident(*plan, model.tensors, "blocks.0.ff.net.0.weight"));
  EXPECT_FALSE(IsResident(*plan, model.tensors, "blocks.1.ff.net.0.weight"));
  EXPECT_THAT(Decision(*plan, "resident_weights"), HasSubstr("1 of 1 weights"));
}

TEST(SessionPlannerTest, ResidentSelectionChoicesAreNamedInTheRefusal) {
  absl::StatusOr<StreamSettings> bad =
      ParseStreamSettings({{"DDO_RESIDENT_MODULE_SELECTION", "fastest"}});
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("'auto', 'compute', 'spread', 'first' or 'largest'"));
  EXPECT_TRUE(ParseStreamSettings({{"DDO_RESIDENT_MODULE_SELECTION", "compute"}}).ok());
}

}  // namespace
}  // namespace ddo
