// File: daemon/policy/settings_resolver_test.cc
#include "daemon/policy/settings_resolver.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace ddo {
namespace {

using ::testing::HasSubstr;

struct Value {
  std::string value;
  SettingSource source;
};

Value Get(const ResolvedSettings& resolved, const std::string& name) {
  for (const auto& value : resolved.values) {
    if (value.name == name) return {value.value, value.source};
  }
  ADD_FAILURE() << name << " not resolved";
  return {};
}

Value GetComponent(const ResolvedSettings& resolved, const std::string& component,
                   const std::string& name) {
  for (const auto& settings : resolved.components) {
    if (settings.component != component) continue;
    for (const auto& value : settings.values) {
      if (value.name == name) return {value.value, value.source};
    }
  }
  ADD_FAILURE() << component << " " << name << " not resolved";
  return {};
}

class SettingsResolverTest : public ::testing::Test {
 protected:
  ResolvedSettings Resolve(PlatformFacts platform = {}) {
    absl::StatusOr<ResolvedSettings> resolved = ResolveSettings(request_, daemon_, platform);
    EXPECT_TRUE(resolved.ok()) << resolved.status();
    return resolved.ok() ? *resolved : ResolvedSettings();
  }

  SettingsRequest request_;
  std::map<std::string, std::string> daemon_;
};

TEST_F(SettingsResolverTest, EveryLayerWinsOverTheOnesBelow) {
  request_.preset = "one_shot_fast";  // DDO_PIN_CPU_WORKERS=4, DDO_SYSTEM_RAM_HEADROOM_GB=8
  // Default only.
  EXPECT_EQ(Get(Resolve(), "DDO_PROFILE_VRAM_HEADROOM_GB").source, SettingSource::kDefault);
  // Preset over default.
  Value headroom = Get(Resolve(), "DDO_SYSTEM_RAM_HEADROOM_GB");
  EXPECT_EQ(headroom.value, "8");
  EXPECT_EQ(headroom.source, SettingSource::kPreset);
  // ddod's environment over the preset.
  daemon_["DDO_SYSTEM_RAM_HEADROOM_GB"] = "9";
  EXPECT_EQ(Get(Resolve(), "DDO_SYSTEM_RAM_HEADROOM_GB").value, "9");
  EXPECT_EQ(Get(Resolve(), "DDO_SYSTEM_RAM_HEADROOM_GB").source, SettingSource::kDaemon);
  // The client's environment over ddod's.
  request_.environment["DDO_SYSTEM_RAM_HEADROOM_GB"] = "10";
  EXPECT_EQ(Get(Resolve(), "DDO_SYSTEM_RAM_HEADROOM_GB").value, "10");
  EXPECT_EQ(Get(Resolve(), "DDO_SYSTEM_RAM_HEADROOM_GB").source, SettingSource::kEnvironment);
  // Explicit overrides over everything.
  request_.overrides["DDO_SYSTEM_RAM_HEADROOM_GB"] = "11";
  EXPECT_EQ(Get(Resolve(), "DDO_SYSTEM_RAM_HEADROOM_GB").value, "11");
  EXPECT_EQ(Get(Resolve(), "DDO_SYSTEM_RAM_HEADROOM_GB").source, SettingSource::kRequest);
}

TEST_F(SettingsResolverTest, ThePresetComesFromTheEnvironmentFirstAndAutoIsOneShotFast) {
  request_.preset = "auto";
  ResolvedSettings resolved = Resolve();
  EXPECT_EQ(resolved.requested_preset, "auto");
  EXPECT_EQ(resolved.effective_preset, "one_shot_fast");
  EXPECT_EQ(Get(resolved, "DDO_EXECUTION_MODE").value, "linear_runtime");

  request_.environment["DDO_PRESET"] = "low_ram_safe";
  resolved = Resolve();
  EXPECT_EQ(resolved.effective_preset, "low_ram_safe");
  EXPECT_EQ(Get(resolved, "DDO_PIN_CPU_MEMORY").value, "0");
  EXPECT_EQ(Get(resolved, "DDO_RESIDENT_MODULE_BUDGET_GB").value, "3");
}

TEST_F(SettingsResolverTest, NoPresetMeansTheResolverDefaults) {
  ResolvedSettings resolved = Resolve();
  EXPECT_EQ(resolved.effective_preset, "");
  EXPECT_EQ(Get(resolved, "DDO_EXECUTION_MODE").value, "plan");
  EXPECT_EQ(Get(resolved, "DDO_SMALL_TENSOR_THRESHOLD_KB").value, "1024");
  EXPECT_EQ(Get(resolved, "DDO_ALWAYS_RESIDENT_MODULE_PATTERNS").value,
            "(^|\\.)(proj_in|time_embed|prompt_adaln|norm_out|proj_out)(\\.|$)");
}

TEST_F(SettingsResolverTest, InvalidValuesAndPresetsAreNamed) {
  request_.preset = "fastest";
  absl::StatusOr<ResolvedSettings> resolved = ResolveSettings(request_, daemon_, {});
  EXPECT_EQ(resolved.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(resolved.status().message(), HasSubstr("fastest"));
  EXPECT_THAT(resolved.status().message(), HasSubstr("one_shot_fast"));

  request_.preset = "";
  request_.environment["DDO_PIN_CPU_WORKERS"] = "many";
  resolved = ResolveSettings(request_, daemon_, {});
  EXPECT_THAT(resolved.status().message(),
              HasSubstr("DDO_PIN_CPU_WORKERS='many' is not a whole number >= 0 (from the client's environment)"));

  request_.environment.clear();
  request_.components.push_back("transformer");
  request_.environment["DDO_TRANSFORMER_ROUTE"] = "gpu";
  resolved = ResolveSettings(request_, daemon_, {});
  EXPECT_THAT(resolved.status().message(), HasSubstr("DDO_TRANSFORMER_ROUTE='gpu' must be one of"));
}

TEST_F(SettingsResolverTest, OneShotFastRoutesAsTheSeedDoes) {
  request_.preset = "one_shot_fast";
  for (const char* component : {"transformer", "text_encoder", "vae", "connectors"}) {
    request_.components.push_back(component);
  }
  ResolvedSettings resolved = Resolve();
  EXPECT_EQ(GetComponent(resolved, "transformer", "DDO_TRANSFORMER_ROUTE").value, "dynamic_offload");
  EXPECT_EQ(GetComponent(resolved, "text_encoder", "DDO_TEXT_ENCODER_ROUTE").value,
            "diffusers_group_offload");
  EXPECT_EQ(GetComponent(resolved, "text_encoder", "DDO_TEXT_ENCODER_OFFLOAD_TYPE").value, "leaf_level");
  EXPECT_EQ(GetComponent(resolved, "text_encoder", "DDO_TEXT_ENCODER_OFFLOAD_STREAM").value, "1");
  // The preset sets the DDO_RUNNER_ alias.
  EXPECT_EQ(GetComponent(resolved, "text_encoder", "DDO_TEXT_ENCODER_GROUP_OFFLOAD").source,
            SettingSource::kPreset);
  EXPECT_EQ(GetComponent(resolved, "vae", "DDO_VAE_ROUTE").value, "dynamic_offload");
  EXPECT_EQ(GetComponent(resolved, "connectors", "DDO_CONNECTORS_ROUTE").value, "dynamic_offload");
}

TEST_F(SettingsResolverTest, OffAndCompatPresetsLeaveUnflaggedComponentsAlone) {
  request_.preset = "diffusers_offload_compat";
  request_.components.push_back("transformer");
  request_.components.push_back("vae");
  ResolvedSettings resolved = Resolve();
  EXPECT_EQ(GetComponent(resolved, "transformer", "DDO_TRANSFORMER_ROUTE").value,
            "diffusers_group_offload");
  EXPECT_EQ(GetComponent(resolved, "transformer", "DDO_TRANSFORMER_OFFLOAD_TYPE").value, "block_level");
  EXPECT_EQ(GetComponent(resolved, "transformer", "DDO_TRANSFORMER_OFFLOAD_RECORD_STREAM").value, "1");
  EXPECT_EQ(GetComponent(resolved, "vae", "DDO_VAE_ROUTE").value, "none");
}

TEST_F(SettingsResolverTest, EachComponentCarriesItsVariablePrefix) {
  request_.components.push_back("Text-Encoder 2");
  request_.components.push_back("");
  ResolvedSettings resolved = Resolve();
  ASSERT_EQ(resolved.components.size(), 2u);
  EXPECT_EQ(resolved.components[0].variable_prefix, "DDO_TEXT_ENCODER_2_");
  EXPECT_EQ(resolved.components[1].variable_prefix, "DDO_MODEL_");
}

TEST_F(SettingsResolverTest, ComponentLookupOrderAndEmptyValuesMoveOn) {
  request_.preset = "one_shot_fast";
  request_.components.push_back("Text-Encoder");
  // DDO_RUNNER_ over the default, DDO_<C>_ over DDO_RUNNER_, the policy over DDO_<C>_, an
  // override of DDO_<C>_ over the policy; empty values move on.
  auto type = [&] { return GetComponent(Resolve(), "Text-Encoder", "DDO_TEXT_ENCODER_OFFLOAD_TYPE"); };
  EXPECT_EQ(type().value, "leaf_level");
  request_.environment["DDO_RUNNER_TEXT_ENCODER_OFFLOAD_TYPE"] = "block_level";
  EXPECT_EQ(type().value, "block_level");
  EXPECT_EQ(type().source, SettingSource::kEnvironment);
  request_.environment["DDO_TEXT_ENCODER_OFFLOAD_TYPE"] = "";
  EXPECT_EQ(type().value, "block_level");
  request_.environment["DDO_TEXT_ENCODER_OFFLOAD_TYPE"] = "leaf_level";
  EXPECT_EQ(type().value, "leaf_level");
  // The policy dict: keyed by the lowercased component, setting spelled with '-'.
  request_.component_policies["text-encoder"]["offload-type"] =
      "block_level";
  EXPECT_EQ(type().value, "block_level");
  EXPECT_EQ(type().source, SettingSource::kComponentPolicy);
  request_.overrides["DDO_TEXT_ENCODER_OFFLOAD_TYPE"] = "leaf_level";
  EXPECT_EQ(type().value, "leaf_level");
  EXPECT_EQ(type().source, SettingSource::kRequest);
}

TEST_F(SettingsResolverTest, WslTurnsOffPinningAndGroupOffloadStreams) {
  request_.preset = "one_shot_fast";
  request_.components.push_back("text_encoder");
  PlatformFacts wsl;
  wsl.wsl = true;
  ResolvedSettings resolved = Resolve(wsl);
  EXPECT_EQ(Get(resolved, "DDO_PIN_CPU_MEMORY").value, "0");
  EXPECT_EQ(Get(resolved, "DDO_PIN_CPU_MEMORY").source, SettingSource::kPlatform);
  EXPECT_EQ(GetComponent(resolved, "text_encoder", "DDO_TEXT_ENCODER_OFFLOAD_STREAM").value, "0");
  EXPECT_EQ(GetComponent(resolved, "text_encoder", "DDO_TEXT_ENCODER_OFFLOAD_RECORD_STREAM").value, "0");
  // Even an explicit use_stream gives way (as in the seed).
  request_.overrides["DDO_TEXT_ENCODER_OFFLOAD_STREAM"] = "1";
  EXPECT_EQ(GetComponent(Resolve(wsl), "text_encoder", "DDO_TEXT_ENCODER_OFFLOAD_STREAM").value, "0");
  // Unless pinning stays allowed on WSL.
  request_.environment["DDO_DISABLE_PIN_ON_WSL"] = "0";
  resolved = Resolve(wsl);
  EXPECT_EQ(Get(resolved, "DDO_PIN_CPU_MEMORY").value, "1");
  EXPECT_EQ(GetComponent(resolved, "text_encoder", "DDO_TEXT_ENCODER_OFFLOAD_STREAM").value, "1");
  // Not on Linux.
  request_.environment.clear();
  EXPECT_EQ(Get(Resolve(), "DDO_PIN_CPU_MEMORY").value, "1");
}

TEST_F(SettingsResolverTest, PurgePhasesAreCollectedFromEveryLayer) {
  request_.preset = "one_shot_fast";
  request_.environment["DDO_PURGE_WINDOWS_STANDBY_BEFORE_DECODE"] = "yes";
  ResolvedSettings resolved = Resolve();
  EXPECT_EQ(Get(resolved, "DDO_PURGE_WINDOWS_STANDBY_BEFORE_RUN").value, "1");
  EXPECT_EQ(Get(resolved, "DDO_PURGE_WINDOWS_STANDBY_BEFORE_DECODE").value, "1");
  EXPECT_EQ(Get(resolved, "DDO_PURGE_WINDOWS_STANDBY_BEFORE_DECODE").source,
            SettingSource::kEnvironment);
}

}  // namespace
}  // namespace ddo
