// File: daemon/config/setting_catalog_test.cc
#include "daemon/config/setting_catalog.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace ddo {
namespace {

using ::testing::HasSubstr;

std::string Normalized(absl::string_view name, absl::string_view raw) {
  const SettingSpec* spec = FindLibrarySetting(name);
  EXPECT_NE(spec, nullptr) << name;
  absl::StatusOr<std::string> value = NormalizeSetting(*spec, name, raw);
  EXPECT_TRUE(value.ok()) << value.status();
  return value.ok() ? *value : "";
}

TEST(SettingCatalogTest, EverySeedLibraryVariableIsKnown) {
  for (const char* name :
       {"DDO_PRESET", "DDO_PLAN", "DDO_EXECUTION_MODE", "DDO_LINEAR_RUNTIME_STRATEGY",
        "DDO_PIN_CPU_MEMORY", "DDO_ALLOW_PIN_MEMORY_FALLBACK", "DDO_DISABLE_PIN_ON_WSL",
        "DDO_PIN_CPU_WORKERS", "DDO_CACHE_PLAN", "DDO_CACHE_PINNED_WEIGHTS",
        "DDO_PINNED_WEIGHT_CACHE_NAMESPACE", "DDO_AUTO_BUDGET_POLICY",
        "DDO_MAX_RESIDENT_MODULE_BUDGET_GB", "DDO_AUTO_VRAM_HEADROOM_GB",
        "DDO_PROFILE_VRAM_HEADROOM_GB", "DDO_AUTO_FULL_PIN_MIN_MODEL_TO_VRAM_RATIO",
        "DDO_MAX_PIN_WEIGHT_BUDGET_GB", "DDO_AVAILABLE_SYSTEM_RAM_GB", "DDO_SYSTEM_RAM_HEADROOM_GB",
        "DDO_PIN_WEIGHT_BUDGET_GB", "DDO_PIN_WEIGHT_BUDGET_RATIO", "DDO_PIN_WEIGHT_SELECTION",
        "DDO_RESIDENT_MODULE_BUDGET_GB", "DDO_RESIDENT_MODULE_PATTERNS",
        "DDO_RESIDENT_MODULE_SELECTION", "DDO_ALWAYS_RESIDENT_MODULE_PATTERNS",
        "DDO_SMALL_TENSOR_THRESHOLD_KB", "DDO_LOAD_SAFETENSORS_BACKEND", "DDO_SAFETENSORS_BACKEND",
        "DDO_VERBOSE", "DDO_SHOW_PROFILE", "DDO_PROFILE_DIR",
        "DDO_PURGE_WINDOWS_STANDBY_BEFORE_RUN", "DDO_PURGE_WINDOWS_STANDBY_AFTER_TEXT_ENCODER"}) {
    EXPECT_NE(FindLibrarySetting(name), nullptr) << name;
  }
  EXPECT_EQ(FindLibrarySetting("DDO_PURGE_WINDOWS_STANDBY_"), nullptr);
  EXPECT_EQ(FindLibrarySetting("DDO_NOT_A_SETTING"), nullptr);
}

TEST(SettingCatalogTest, ValuesAreNormalisedWithTheSeedsRules) {
  EXPECT_EQ(Normalized("DDO_PIN_CPU_MEMORY", " Yes "), "1");
  EXPECT_EQ(Normalized("DDO_PIN_CPU_MEMORY", "2"), "0");  // only 1/true/yes/on are true
  EXPECT_EQ(Normalized("DDO_PIN_CPU_MEMORY", ""), "0");
  EXPECT_EQ(Normalized("DDO_EXECUTION_MODE", "Linear_Runtime"), "linear_runtime");
  EXPECT_EQ(Normalized("DDO_PIN_CPU_WORKERS", " 8"), "8");
  EXPECT_EQ(Normalized("DDO_SYSTEM_RAM_HEADROOM_GB", "7.5"), "7.5");
  EXPECT_EQ(Normalized("DDO_RESIDENT_MODULE_PATTERNS", " auto ; ^blocks\\.\\d+$ ,, "),
            "auto,^blocks\\.\\d+$");
}

TEST(SettingCatalogTest, InvalidValuesNameTheVariableTheValueAndTheChoices) {
  auto check = [](absl::string_view name, absl::string_view raw, absl::string_view expected) {
    absl::StatusOr<std::string> value = NormalizeSetting(*FindLibrarySetting(name), name, raw);
    ASSERT_FALSE(value.ok()) << name << "=" << raw;
    EXPECT_EQ(value.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(value.status().message(), HasSubstr(expected));
  };
  check("DDO_EXECUTION_MODE", "fast", "DDO_EXECUTION_MODE='fast' must be one of plan, linear_runtime, sdnq_runtime");
  check("DDO_PIN_CPU_WORKERS", "four", "DDO_PIN_CPU_WORKERS='four' is not a whole number");
  check("DDO_SYSTEM_RAM_HEADROOM_GB", "-1", "DDO_SYSTEM_RAM_HEADROOM_GB");
  check("DDO_ALWAYS_RESIDENT_MODULE_PATTERNS", "(open", "not a regular expression");
}

TEST(SettingCatalogTest, NumbersMustBeFiniteAndInTheirRange) {
  auto refused = [](absl::string_view name, absl::string_view raw, absl::string_view expected) {
    absl::StatusOr<std::string> value = NormalizeSetting(*FindLibrarySetting(name), name, raw);
    ASSERT_FALSE(value.ok()) << name << "=" << raw;
    EXPECT_EQ(value.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(value.status().message(), HasSubstr(expected));
  };
  for (const char* bad : {"1e308", "nan", "inf", "-1", "1048577"}) {
    refused("DDO_SMALL_TENSOR_THRESHOLD_KB", bad, "DDO_SMALL_TENSOR_THRESHOLD_KB='");
    refused("DDO_RESIDENT_MODULE_BUDGET_GB", bad, "DDO_RESIDENT_MODULE_BUDGET_GB='");
    refused("DDO_VRAM_BUDGET_GB", bad, "from 0 to 1048576");
  }
  refused("DDO_SMALL_TENSOR_THRESHOLD_KB", "1048577", "a whole number from 0 to 1048576");
  refused("DDO_SMALL_TENSOR_THRESHOLD_KB", "18446744073709551615", "from 0 to 1048576");
  refused("DDO_PIN_WEIGHT_BUDGET_RATIO", "1.5",
          "DDO_PIN_WEIGHT_BUDGET_RATIO='1.5' is not a finite number from 0 to 1");
  refused("DDO_PIN_CPU_WORKERS", "0", "from 1 to 256");
  refused("DDO_PIN_CPU_WORKERS", "257", "from 1 to 256");
  refused("DDO_RING_SLOTS", "65", "from 2 to 64");
  EXPECT_EQ(Normalized("DDO_SMALL_TENSOR_THRESHOLD_KB", "1048576"), "1048576");
  EXPECT_EQ(Normalized("DDO_SMALL_TENSOR_THRESHOLD_KB", "0"), "0");
  EXPECT_EQ(Normalized("DDO_PIN_WEIGHT_BUDGET_RATIO", "0.25"), "0.25");
  EXPECT_EQ(Normalized("DDO_RING_SLOTS", ""), "");
  const SettingSpec* blocks = FindComponentSetting("NUM_BLOCKS_PER_GROUP");
  EXPECT_FALSE(NormalizeSetting(*blocks, "DDO_VAE_NUM_BLOCKS_PER_GROUP", "0").ok());
  EXPECT_TRUE(NormalizeSetting(*blocks, "DDO_VAE_NUM_BLOCKS_PER_GROUP", "2").ok());
  // Every numeric setting has a range, and its default lies inside it.
  for (const auto* settings : {&LibrarySettings(), &ComponentSettings()}) {
    for (const SettingSpec& spec : *settings) {
      if (spec.type != SettingType::kInt && spec.type != SettingType::kNumber) continue;
      EXPECT_LT(spec.min_value, spec.max_value) << spec.name;
      if (!spec.default_value.empty()) {
        EXPECT_TRUE(NormalizeSetting(spec, spec.name, spec.default_value).ok()) << spec.name;
      }
    }
  }
}

TEST(SettingCatalogTest, PatternListsAreBoundedAndNamedByIndex) {
  auto message = [](absl::string_view raw) {
    absl::StatusOr<std::string> value = NormalizeSetting(
        *FindLibrarySetting("DDO_RESIDENT_MODULE_PATTERNS"), "DDO_RESIDENT_MODULE_PATTERNS", raw);
    EXPECT_FALSE(value.ok()) << raw;
    return std::string(value.status().message());
  };
  EXPECT_THAT(message("auto;ok;" + std::string(513, 'p')),
              HasSubstr("DDO_RESIDENT_MODULE_PATTERNS[2]='pppp"));
  EXPECT_THAT(message("auto;ok;" + std::string(513, 'p')), HasSubstr("at most 512"));
  std::string many = "auto";
  for (int i = 0; i < 64; ++i) many += ",x";
  EXPECT_THAT(message(many), HasSubstr("DDO_RESIDENT_MODULE_PATTERNS: 65 patterns, at most 64"));
  EXPECT_THAT(message("ok,(a)\\1"),
              HasSubstr("DDO_RESIDENT_MODULE_PATTERNS[1]='(a)\\\\1' is not a regular expression"));
  // The escaped excerpt: no raw control characters.
  EXPECT_THAT(message("(\x1b[2J"), HasSubstr("[0]='(\\x1b[2J'"));
  // (x+x+)+y is valid RE2 (and harmless there).
  EXPECT_EQ(Normalized("DDO_RESIDENT_MODULE_PATTERNS", "(x+x+)+y"), "(x+x+)+y");
}

TEST(SettingCatalogTest, RouteAliasesAreTheSeeds) {
  for (const auto& [alias, route] : std::vector<std::pair<std::string, std::string>>{
           {"diffusers", "diffusers_group_offload"}, {"diffusers_group", "diffusers_group_offload"},
           {"group", "diffusers_group_offload"}, {"group_offload", "diffusers_group_offload"},
           {"dynamic", "dynamic_offload"}, {"ddo", "dynamic_offload"}, {"cuda", "none"},
           {"standard", "none"}, {"none", "none"}, {"OFF", "none"}, {"auto", "auto"}}) {
    absl::StatusOr<std::string> canonical = CanonicalRoute(alias, "DDO_TRANSFORMER_ROUTE");
    ASSERT_TRUE(canonical.ok()) << alias;
    EXPECT_EQ(*canonical, route) << alias;
  }
  EXPECT_THAT(CanonicalRoute("gpu", "DDO_VAE_ROUTE").status().message(),
              HasSubstr("DDO_VAE_ROUTE='gpu' must be one of auto, dynamic_offload"));
}

TEST(SettingCatalogTest, ComponentPrefixFollowsTheSeed) {
  EXPECT_EQ(ComponentPrefix("text_encoder"), "TEXT_ENCODER");
  EXPECT_EQ(ComponentPrefix("text-encoder 2"), "TEXT_ENCODER_2");
  EXPECT_EQ(ComponentPrefix("__vae__"), "VAE");
  EXPECT_EQ(ComponentPrefix("---"), "MODEL");
  EXPECT_EQ(ComponentPrefix(""), "MODEL");
}

TEST(SettingCatalogTest, SettingVariablesKeepsOnlySettings) {
  const std::map<std::string, std::string, std::less<>> env = {
      {"DDO_PIN_CPU_MEMORY", "1"}, {"DDO_TRANSFORMER_OFFLOAD_TYPE", "block_level"},
      {"DDO_SOCKET", "/tmp/x"}, {"DDO_PRESET", "off"}, {"HOME", "/root"}};
  EXPECT_EQ(SettingVariables(env),
            (std::map<std::string, std::string>{{"DDO_PIN_CPU_MEMORY", "1"},
                                                {"DDO_TRANSFORMER_OFFLOAD_TYPE", "block_level"}}));
}

}  // namespace
}  // namespace ddo
