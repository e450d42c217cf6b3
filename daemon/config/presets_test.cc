#include "daemon/config/presets.h"

#include <set>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ddo {
namespace {

using ::testing::HasSubstr;

TEST(PresetsTest, HasExactlyTheSeedsPresets) {
  std::set<std::string> names;
  for (const auto& preset : AllPresets()) names.insert(preset.name);
  EXPECT_EQ(names, (std::set<std::string>{"one_shot_fast", "low_ram_safe", "wsl_compat",
                                          "warm_process", "diffusers_offload_compat",
                                          "diffusers_leaf_offload_compat", "off"}));
}

TEST(PresetsTest, AutoResolvesToOneShotFast) {
  auto preset = ResolvePreset(" AUTO ");
  ASSERT_TRUE(preset.ok());
  EXPECT_EQ((*preset)->name, "one_shot_fast");
}

TEST(PresetsTest, RemovedNamesAreRejectedWithTheValidList) {
  for (const char* removed : {"compat", "windows_fast", "warm_server", "low_ram", "nope"}) {
    auto preset = ResolvePreset(removed);
    ASSERT_FALSE(preset.ok()) << removed;
    EXPECT_THAT(std::string(preset.status().message()), HasSubstr(removed));
    EXPECT_THAT(std::string(preset.status().message()), HasSubstr("warm_process"));
  }
}

TEST(PresetsTest, SeedTableValues) {
  const auto* warm = *ResolvePreset("warm_process");
  EXPECT_EQ(warm->Find("DDO_CACHE_PINNED_WEIGHTS"), "1");
  EXPECT_EQ(warm->Find("DDO_RESIDENT_MODULE_BUDGET_GB"), "6");
  EXPECT_EQ(warm->Find("DDO_RUNNER_GENERATION_REPEATS"), "2");
  EXPECT_EQ(warm->Find("DDO_AUTO_BUDGET_POLICY"), "off");
  const auto* fast = *ResolvePreset("one_shot_fast");
  EXPECT_EQ(fast->Find("DDO_SYSTEM_RAM_HEADROOM_GB"), "8");
  EXPECT_EQ(fast->Find("DDO_AUTO_BUDGET_POLICY"), "balanced");
  EXPECT_EQ(fast->Find("DDO_PIN_CPU_WORKERS"), "4");
  const auto* block = *ResolvePreset("diffusers_offload_compat");
  EXPECT_EQ(block->Find("DDO_RUNNER_TRANSFORMER_OFFLOAD_TYPE"), "block_level");
  EXPECT_EQ(block->Find("DDO_RUNNER_TRANSFORMER_NUM_BLOCKS_PER_GROUP"), "1");
  const auto* leaf = *ResolvePreset("diffusers_leaf_offload_compat");
  EXPECT_EQ(leaf->Find("DDO_RUNNER_TRANSFORMER_OFFLOAD_TYPE"), "leaf_level");
  EXPECT_EQ(leaf->Find("DDO_RUNNER_TRANSFORMER_NUM_BLOCKS_PER_GROUP"), std::nullopt);
  const auto* low = *ResolvePreset("low_ram_safe");
  EXPECT_EQ(low->Find("DDO_PIN_CPU_MEMORY"), "0");
  EXPECT_EQ(low->Find("DDO_RESIDENT_MODULE_BUDGET_GB"), "3");
  const auto* off = *ResolvePreset("off");
  EXPECT_EQ(off->Find("DDO_PLAN"), "0");
  EXPECT_EQ(off->Find("DDO_PIN_CPU_MEMORY"), std::nullopt);
}

}  // namespace
}  // namespace ddo
