// File: daemon/policy/settings_resolver_test.cc
#include "daemon/policy/settings_resolver.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace ddo {
namespace {

using ::testing::HasSubstr;
using ddo::v1::SettingSource;

struct Value {
  std::string value;
  SettingSource source;
};

Value Get(const ddo::v1::ResolvedSettings& resolved, const std::string& name) {
  for (const auto& value : resolved.values()) {
    if (value.name() == name) return {value.value(), value.source()};
  }
  ADD_FAILURE() << name << " not resolved";
  return {};
}

Value GetComponent(const ddo::v1::ResolvedSettings& resolved, const std::string& component,
                   const std::string& name) {
  for (const auto& settings : resolved.components()) {
    if (settings.component() != component) continue;
    for (const auto& value : settings.values()) {
      if (value.name() == name) return {value.value(), value.source()};
    }
  }
  ADD_FAILURE() << component << " " << name << " not resolved";
  return {};
}

class SettingsResolverTest : public ::testing::Test {
 protected:
  ddo::v1::ResolvedSettings Resolve(PlatformFacts platform = {}) {
    absl::StatusOr<ddo::v1::ResolvedSettings> resolved = ResolveSettings(request_, daemon_, platform);
    EXPECT_TRUE(resolved.ok()) << resolved.status();
    return resolved.ok() ? *resolved : ddo::v1::ResolvedSettings();
  }

  ddo::v1::ResolveSettingsRequest request_;
  std::map<std::string, std::string> daemon_;
};

TEST_F(SettingsResolverTest, EveryLayerWinsOverTheOnesBelow) {
  request_.set_preset("one_shot_fast");  // DDO_PIN_CPU_WORKERS=4, DDO_SYSTEM_RAM_HEADROOM_GB=8
  // Default only.
  EXPECT_EQ(Get(Resolve(), "DDO_PROFILE_VRAM_HEADROOM_GB").source, ddo::v1::SETTING_SOURCE_DEFAULT);
  // Preset over default.
  Value headroom = Get(Resolve(), "DDO_SYSTEM_RAM_HEADROOM_GB");
  EXPECT_EQ(headroom.value, "8");
  EXPECT_EQ(headroom.source, ddo::v1::SETTING_SOURCE_PRESET);
  // ddod's environment over the preset.
  daemon_["DDO_SYSTEM_RAM_HEADROOM_GB"] = "9";
  EXPECT_EQ(Get(Resolve(), "DDO_SYSTEM_RAM_HEADROOM_GB").value, "9");
  EXPECT_EQ(Get(Resolve(), "DDO_SYSTEM_RAM_HEADROOM_GB").source, ddo::v1::SETTING_SOURCE_DAEMON_FLAG);
  // The client's environment over ddod's.
  (*request_.mutable_environment())["DDO_SYSTEM_RAM_HEADROOM_GB"] = "10";
  EXPECT_EQ(Get(Resolve(), "DDO_SYSTEM_RAM_HEADROOM_GB").value, "10");
  EXPECT_EQ(Get(Resolve(), "DDO_SYSTEM_RAM_HEADROOM_GB").source, ddo::v1::SETTING_SOURCE_ENVIRONMENT);
  // Explicit overrides over everything.
  (*request_.mutable_overrides())["DDO_SYSTEM_RAM_HEADROOM_GB"] = "11";
  EXPECT_EQ(Get(Resolve(), "DDO_SYSTEM_RAM_HEADROOM_GB").value, "11");
  EXPECT_EQ(Get(Resolve(), "DDO_SYSTEM_RAM_HEADROOM_GB").source, ddo::v1::SETTING_SOURCE_REQUEST);
}

TEST_F(SettingsResolverTest, ThePresetComesFromTheEnvironmentFirstAndAutoIsOneShotFast) {
  request_.set_preset("auto");
  ddo::v1::ResolvedSettings resolved = Resolve();
  EXPECT_EQ(resolved.requested_preset(), "auto");
  EXPECT_EQ(resolved.effective_preset(), "one_shot_fast");
  EXPECT_EQ(Get(resolved, "DDO_EXECUTION_MODE").value, "linear_runtime");

  (*request_.mutable_environment())["DDO_PRESET"] = "low_ram_safe";
  resolved = Resolve();
  EXPECT_EQ(resolved.effective_preset(), "low_ram_safe");
  EXPECT_EQ(Get(resolved, "DDO_PIN_CPU_MEMORY").value, "0");
  EXPECT_EQ(Get(resolved, "DDO_RESIDENT_MODULE_BUDGET_GB").value, "3");
}

TEST_F(SettingsResolverTest, NoPresetMeansTheResolverDefaults) {
  ddo::v1::ResolvedSettings resolved = Resolve();
  EXPECT_EQ(resolved.effective_preset(), "");
  EXPECT_EQ(Get(resolved, "DDO_EXECUTION_MODE").value, "plan");
  EXPECT_EQ(Get(resolved, "DDO_SMALL_TENSOR_THRESHOLD_KB").value, "1024");
  EXPECT_EQ(Get(resolved, "DDO_ALWAYS_RESIDENT_MODULE_PATTERNS").value,
            "(^|\\.)(proj_in|time_embed|prompt_adaln|norm_out|proj_out)(\\.|$)");
}

TEST_F(SettingsResolverTest, InvalidValuesAndPresetsAreNamed) {
  request_.set_preset("fastest");
  absl::StatusOr<ddo::v1::ResolvedSettings> resolved = ResolveSettings(request_, daemon_, {});
  EXPECT_EQ(resolved.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(resolved.status().message(), HasSubstr("fastest"));
  EXPECT_THAT(resolved.status().message(), HasSubstr("one_shot_fast"));

  request_.set_preset("");
  (*request_.mutable_environment())["DDO_PIN_CPU_WORKERS"] = "many";
  resolved = ResolveSettings(request_, daemon_, {});
  EXPECT_THAT(resolved.status().message(),
              HasSubstr("DDO_PIN_CPU_WORKERS='many' is not a whole number >= 0 (from the client's environment)"));

  request_.mutable_environment()->clear();
  request_.add_components("transformer");
  (*request_.mutable_environment())["DDO_TRANSFORMER_ROUTE"] = "gpu";
  resolved = ResolveSettings(request_, daemon_, {});
  EXPECT_THAT(resolved.status().message(), HasSubstr("DDO_TRANSFORMER_ROUTE='gpu' must be one of"));
}

TEST_F(SettingsResolverTest, OneShotFastRoutesAsTheSeedDoes) {
  request_.set_preset("one_shot_fast");
  for (const char* component : {"transformer", "text_encoder", "vae", "connectors"}) {
    request_.add_components(component);
  }
  ddo::v1::ResolvedSettings resolved = Resolve();
  EXPECT_EQ(GetComponent(resolved, "transformer", "DDO_TRANSFORMER_ROUTE").value, "dynamic_offload");
  EXPECT_EQ(GetComponent(resolved, "text_encoder", "DDO_TEXT_ENCODER_ROUTE").value,
            "diffusers_group_offload");
  EXPECT_EQ(GetComponent(resolved, "text_encoder", "DDO_TEXT_ENCODER_OFFLOAD_TYPE").value, "leaf_level");
  EXPECT_EQ(GetComponent(resolved, "text_encoder", "DDO_TEXT_ENCODER_OFFLOAD_STREAM").value, "1");
  // The preset sets the DDO_RUNNER_ alias.
  EXPECT_EQ(GetComponent(resolved, "text_encoder", "DDO_TEXT_ENCODER_GROUP_OFFLOAD").source,
            ddo::v1::SETTING_SOURCE_PRESET);
  EXPECT_EQ(GetComponent(resolved, "vae", "DDO_VAE_ROUTE").value, "dynamic_offload");
  EXPECT_EQ(GetComponent(resolved, "connectors", "DDO_CONNECTORS_ROUTE").value, "dynamic_offload");
}

TEST_F(SettingsResolverTest, OffAndCompatPresetsLeaveUnflaggedComponentsAlone) {
  request_.set_preset("diffusers_offload_compat");
  request_.add_components("transformer");
  request_.add_components("vae");
  ddo::v1::ResolvedSettings resolved = Resolve();
  EXPECT_EQ(GetComponent(resolved, "transformer", "DDO_TRANSFORMER_ROUTE").value,
            "diffusers_group_offload");
  EXPECT_EQ(GetComponent(resolved, "transformer", "DDO_TRANSFORMER_OFFLOAD_TYPE").value, "block_level");
  EXPECT_EQ(GetComponent(resolved, "transformer", "DDO_TRANSFORMER_OFFLOAD_RECORD_STREAM").value, "1");
  EXPECT_EQ(GetComponent(resolved, "vae", "DDO_VAE_ROUTE").value, "none");
}

TEST_F(SettingsResolverTest, EachComponentCarriesItsVariablePrefix) {
  request_.add_components("Text-Encoder 2");
  request_.add_components("");
  ddo::v1::ResolvedSettings resolved = Resolve();
  ASSERT_EQ(resolved.components_size(), 2);
  EXPECT_EQ(resolved.components(0).variable_prefix(), "DDO_TEXT_ENCODER_2_");
  EXPECT_EQ(resolved.components(1).variable_prefix(), "DDO_MODEL_");
}

TEST_F(SettingsResolverTest, ComponentLookupOrderAndEmptyValuesMoveOn) {
  request_.set_preset("one_shot_fast");
  request_.add_components("Text-Encoder");
  // DDO_RUNNER_ over the default, DDO_<C>_ over DDO_RUNNER_, the policy over DDO_<C>_, an
  // override of DDO_<C>_ over the policy; empty values move on.
  auto type = [&] { return GetComponent(Resolve(), "Text-Encoder", "DDO_TEXT_ENCODER_OFFLOAD_TYPE"); };
  EXPECT_EQ(type().value, "leaf_level");
  (*request_.mutable_environment())["DDO_RUNNER_TEXT_ENCODER_OFFLOAD_TYPE"] = "block_level";
  EXPECT_EQ(type().value, "block_level");
  EXPECT_EQ(type().source, ddo::v1::SETTING_SOURCE_ENVIRONMENT);
  (*request_.mutable_environment())["DDO_TEXT_ENCODER_OFFLOAD_TYPE"] = "";
  EXPECT_EQ(type().value, "block_level");
  (*request_.mutable_environment())["DDO_TEXT_ENCODER_OFFLOAD_TYPE"] = "leaf_level";
  EXPECT_EQ(type().value, "leaf_level");
  // The policy dict: keyed by the lowercased component, setting spelled with '-'.
  (*(*request_.mutable_component_policies())["text-encoder"].mutable_values())["offload-type"] =
      "block_level";
  EXPECT_EQ(type().value, "block_level");
  EXPECT_EQ(type().source, ddo::v1::SETTING_SOURCE_COMPONENT_POLICY);
  (*request_.mutable_overrides())["DDO_TEXT_ENCODER_OFFLOAD_TYPE"] = "leaf_level";
  EXPECT_EQ(type().value, "leaf_level");
  EXPECT_EQ(type().source, ddo::v1::SETTING_SOURCE_REQUEST);
}

TEST_F(SettingsResolverTest, WslTurnsOffPinningAndGroupOffloadStreams) {
  request_.set_preset("one_shot_fast");
  request_.add_components("text_encoder");
  PlatformFacts wsl;
  wsl.wsl = true;
  ddo::v1::ResolvedSettings resolved = Resolve(wsl);
  EXPECT_EQ(Get(resolved, "DDO_PIN_CPU_MEMORY").value, "0");
  EXPECT_EQ(Get(resolved, "DDO_PIN_CPU_MEMORY").source, ddo::v1::SETTING_SOURCE_PLATFORM);
  EXPECT_EQ(GetComponent(resolved, "text_encoder", "DDO_TEXT_ENCODER_OFFLOAD_STREAM").value, "0");
  EXPECT_EQ(GetComponent(resolved, "text_encoder", "DDO_TEXT_ENCODER_OFFLOAD_RECORD_STREAM").value, "0");
  // Even an explicit use_stream gives way (as in the seed).
  (*request_.mutable_overrides())["DDO_TEXT_ENCODER_OFFLOAD_STREAM"] = "1";
  EXPECT_EQ(GetComponent(Resolve(wsl), "text_encoder", "DDO_TEXT_ENCODER_OFFLOAD_STREAM").value, "0");
  // Unless pinning stays allowed on WSL.
  (*request_.mutable_environment())["DDO_DISABLE_PIN_ON_WSL"] = "0";
  resolved = Resolve(wsl);
  EXPECT_EQ(Get(resolved, "DDO_PIN_CPU_MEMORY").value, "1");
  EXPECT_EQ(GetComponent(resolved, "text_encoder", "DDO_TEXT_ENCODER_OFFLOAD_STREAM").value, "1");
  // Not on Linux.
  request_.mutable_environment()->clear();
  EXPECT_EQ(Get(Resolve(), "DDO_PIN_CPU_MEMORY").value, "1");
}

TEST_F(SettingsResolverTest, PurgePhasesAreCollectedFromEveryLayer) {
  request_.set_preset("one_shot_fast");
  (*request_.mutable_environment())["DDO_PURGE_WINDOWS_STANDBY_BEFORE_DECODE"] = "yes";
  ddo::v1::ResolvedSettings resolved = Resolve();
  EXPECT_EQ(Get(resolved, "DDO_PURGE_WINDOWS_STANDBY_BEFORE_RUN").value, "1");
  EXPECT_EQ(Get(resolved, "DDO_PURGE_WINDOWS_STANDBY_BEFORE_DECODE").value, "1");
  EXPECT_EQ(Get(resolved, "DDO_PURGE_WINDOWS_STANDBY_BEFORE_DECODE").source,
            ddo::v1::SETTING_SOURCE_ENVIRONMENT);
}

}  // namespace
}  // namespace ddo
