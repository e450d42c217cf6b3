#include "daemon/config/presets.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace ddo {
namespace {

std::vector<PresetDefinition> BuildPresets() {
  // Values exactly as the seed's DDO_PRESETS (docs/configuration.md §9). Keys a preset does
  // not set fall through to the resolver defaults.
  return {
      {"one_shot_fast",
       "One generation per process, as fast as RAM allows: pinned weights, balanced planner",
       {{"DDO_EXECUTION_MODE", "linear_runtime"},
        {"DDO_PIN_CPU_MEMORY", "1"},
        {"DDO_ALLOW_PIN_MEMORY_FALLBACK", "1"},
        {"DDO_PIN_CPU_WORKERS", "4"},
        {"DDO_AUTO_BUDGET_POLICY", "balanced"},
        {"DDO_MAX_RESIDENT_MODULE_BUDGET_GB", "0"},
        {"DDO_SYSTEM_RAM_HEADROOM_GB", "8"},
        {"DDO_RESIDENT_MODULE_BUDGET_GB", "0"},
        {"DDO_RESIDENT_MODULE_PATTERNS", "auto"},
        {"DDO_RESIDENT_MODULE_SELECTION", "auto"},
        {"DDO_SMALL_TENSOR_THRESHOLD_KB", "1024"},
        {"DDO_PURGE_WINDOWS_STANDBY_BEFORE_RUN", "1"},
        {"DDO_PURGE_WINDOWS_STANDBY_AFTER_TEXT_ENCODER", "1"},
        {"DDO_PURGE_WINDOWS_STANDBY_BEFORE_TRANSFORMER", "1"},
        {"DDO_RUNNER_TEXT_ENCODER_GROUP_OFFLOAD", "1"},
        {"DDO_RUNNER_TEXT_ENCODER_OFFLOAD_TYPE", "leaf_level"},
        {"DDO_RUNNER_TEXT_ENCODER_OFFLOAD_STREAM", "1"},
        {"DDO_RUNNER_TEXT_ENCODER_DYNAMIC_OFFLOAD", "0"},
        {"DDO_RUNNER_TRANSFORMER_GROUP_OFFLOAD", "0"},
        {"DDO_RUNNER_TRANSFORMER_MEMORY_MANAGER", "off"},
        {"DDO_RUNNER_ATTENTION_BACKEND", "native"},
        {"DDO_RUNNER_PRE_VAE_CLEANUP_REPEATS", "1"}}},
      {"low_ram_safe",
       "Little RAM: nothing pinned, one pin worker, fixed 3 GiB resident budget",
       {{"DDO_EXECUTION_MODE", "linear_runtime"},
        {"DDO_PIN_CPU_MEMORY", "0"},
        {"DDO_ALLOW_PIN_MEMORY_FALLBACK", "1"},
        {"DDO_PIN_CPU_WORKERS", "1"},
        {"DDO_AUTO_BUDGET_POLICY", "off"},
        {"DDO_RESIDENT_MODULE_BUDGET_GB", "3"},
        {"DDO_RESIDENT_MODULE_PATTERNS", "auto"},
        {"DDO_RESIDENT_MODULE_SELECTION", "auto"},
        {"DDO_SMALL_TENSOR_THRESHOLD_KB", "1024"},
        {"DDO_RUNNER_TEXT_ENCODER_GROUP_OFFLOAD", "1"},
        {"DDO_RUNNER_TEXT_ENCODER_OFFLOAD_TYPE", "leaf_level"},
        {"DDO_RUNNER_TEXT_ENCODER_OFFLOAD_STREAM", "0"},
        {"DDO_RUNNER_TEXT_ENCODER_DYNAMIC_OFFLOAD", "0"},
        {"DDO_RUNNER_TRANSFORMER_GROUP_OFFLOAD", "0"},
        {"DDO_RUNNER_TRANSFORMER_MEMORY_MANAGER", "off"},
        {"DDO_RUNNER_ATTENTION_BACKEND", "native"}}},
      {"wsl_compat",
       "WSL: pinning disabled there, fixed 6 GiB resident budget, text-encoder stream off",
       {{"DDO_EXECUTION_MODE", "linear_runtime"},
        {"DDO_PIN_CPU_MEMORY", "0"},
        {"DDO_ALLOW_PIN_MEMORY_FALLBACK", "1"},
        {"DDO_DISABLE_PIN_ON_WSL", "1"},
        {"DDO_PIN_CPU_WORKERS", "1"},
        {"DDO_AUTO_BUDGET_POLICY", "off"},
        {"DDO_RESIDENT_MODULE_BUDGET_GB", "6"},
        {"DDO_RESIDENT_MODULE_PATTERNS", "auto"},
        {"DDO_RESIDENT_MODULE_SELECTION", "auto"},
        {"DDO_SMALL_TENSOR_THRESHOLD_KB", "1024"},
        {"DDO_RUNNER_TEXT_ENCODER_GROUP_OFFLOAD", "1"},
        {"DDO_RUNNER_TEXT_ENCODER_OFFLOAD_TYPE", "leaf_level"},
        {"DDO_RUNNER_TEXT_ENCODER_OFFLOAD_STREAM", "0"},
        {"DDO_RUNNER_TRANSFORMER_GROUP_OFFLOAD", "0"},
        {"DDO_RUNNER_TRANSFORMER_MEMORY_MANAGER", "off"},
        {"DDO_RUNNER_ATTENTION_BACKEND", "native"},
        {"DDO_RUNNER_PRE_VAE_CLEANUP_REPEATS", "3"}}},
      {"warm_process",
       "Long-lived service: weights stay pinned in ddod and warm for every later runner",
       {{"DDO_EXECUTION_MODE", "linear_runtime"},
        {"DDO_PIN_CPU_MEMORY", "1"},
        {"DDO_ALLOW_PIN_MEMORY_FALLBACK", "1"},
        {"DDO_PIN_CPU_WORKERS", "4"},
        {"DDO_CACHE_PINNED_WEIGHTS", "1"},
        {"DDO_AUTO_BUDGET_POLICY", "off"},
        {"DDO_RESIDENT_MODULE_BUDGET_GB", "6"},
        {"DDO_RESIDENT_MODULE_PATTERNS", "auto"},
        {"DDO_RESIDENT_MODULE_SELECTION", "auto"},
        {"DDO_SMALL_TENSOR_THRESHOLD_KB", "1024"},
        {"DDO_RUNNER_TEXT_ENCODER_GROUP_OFFLOAD", "1"},
        {"DDO_RUNNER_TEXT_ENCODER_OFFLOAD_TYPE", "leaf_level"},
        {"DDO_RUNNER_TEXT_ENCODER_OFFLOAD_STREAM", "1"},
        {"DDO_RUNNER_TEXT_ENCODER_DYNAMIC_OFFLOAD", "0"},
        {"DDO_RUNNER_TRANSFORMER_GROUP_OFFLOAD", "0"},
        {"DDO_RUNNER_TRANSFORMER_MEMORY_MANAGER", "off"},
        {"DDO_RUNNER_ATTENTION_BACKEND", "native"},
        {"DDO_RUNNER_GENERATION_REPEATS", "2"}}},
      {"diffusers_offload_compat",
       "DDO off; transformer on diffusers group offload block_level (1 block per group)",
       {{"DDO_EXECUTION_MODE", "plan"},
        {"DDO_PLAN", "0"},
        {"DDO_RUNNER_TEXT_ENCODER_GROUP_OFFLOAD", "1"},
        {"DDO_RUNNER_TEXT_ENCODER_OFFLOAD_TYPE", "leaf_level"},
        {"DDO_RUNNER_TEXT_ENCODER_OFFLOAD_STREAM", "1"},
        {"DDO_RUNNER_TEXT_ENCODER_DYNAMIC_OFFLOAD", "0"},
        {"DDO_RUNNER_TRANSFORMER_GROUP_OFFLOAD", "1"},
        {"DDO_RUNNER_TRANSFORMER_OFFLOAD_TYPE", "block_level"},
        {"DDO_RUNNER_TRANSFORMER_OFFLOAD_STREAM", "1"},
        {"DDO_RUNNER_TRANSFORMER_OFFLOAD_RECORD_STREAM", "1"},
        {"DDO_RUNNER_TRANSFORMER_OFFLOAD_LOW_CPU_MEM_USAGE", "1"},
        {"DDO_RUNNER_TRANSFORMER_NUM_BLOCKS_PER_GROUP", "1"},
        {"DDO_RUNNER_TRANSFORMER_MEMORY_MANAGER", "off"},
        {"DDO_RUNNER_ATTENTION_BACKEND", "native"},
        {"DDO_RUNNER_PRE_VAE_CLEANUP_REPEATS", "1"}}},
      {"diffusers_leaf_offload_compat",
       "DDO off; transformer on diffusers group offload leaf_level",
       {{"DDO_EXECUTION_MODE", "plan"},
        {"DDO_PLAN", "0"},
        {"DDO_RUNNER_TEXT_ENCODER_GROUP_OFFLOAD", "1"},
        {"DDO_RUNNER_TEXT_ENCODER_OFFLOAD_TYPE", "leaf_level"},
        {"DDO_RUNNER_TEXT_ENCODER_OFFLOAD_STREAM", "1"},
        {"DDO_RUNNER_TEXT_ENCODER_DYNAMIC_OFFLOAD", "0"},
        {"DDO_RUNNER_TRANSFORMER_GROUP_OFFLOAD", "1"},
        {"DDO_RUNNER_TRANSFORMER_OFFLOAD_TYPE", "leaf_level"},
        {"DDO_RUNNER_TRANSFORMER_OFFLOAD_STREAM", "1"},
        {"DDO_RUNNER_TRANSFORMER_OFFLOAD_RECORD_STREAM", "1"},
        {"DDO_RUNNER_TRANSFORMER_OFFLOAD_LOW_CPU_MEM_USAGE", "1"},
        {"DDO_RUNNER_TRANSFORMER_MEMORY_MANAGER", "off"},
        {"DDO_RUNNER_ATTENTION_BACKEND", "native"},
        {"DDO_RUNNER_PRE_VAE_CLEANUP_REPEATS", "1"}}},
      {"off",
       "DDO disabled: every component routed to none and moved to the device",
       {{"DDO_EXECUTION_MODE", "plan"}, {"DDO_PLAN", "0"}}},
  };
}

}  // namespace

std::optional<std::string> PresetDefinition::Find(absl::string_view variable) const {
  for (const auto& [key, value] : values) {
    if (key == variable) {
      return value;
    }
  }
  return std::nullopt;
}

const std::vector<PresetDefinition>& AllPresets() {
  static const auto* presets = new std::vector<PresetDefinition>(BuildPresets());
  return *presets;
}

const std::vector<std::pair<std::string, std::string>>& PresetAliases() {
  static const auto* aliases =
      new std::vector<std::pair<std::string, std::string>>{{"auto", "one_shot_fast"}};
  return *aliases;
}

std::string ValidPresetNames() {
  std::vector<std::string> names;
  for (const auto& [alias, target] : PresetAliases()) {
    names.push_back(alias);
  }
  for (const auto& preset : AllPresets()) {
    names.push_back(preset.name);
  }
  return absl::StrJoin(names, ", ");
}

absl::StatusOr<const PresetDefinition*> ResolvePreset(absl::string_view name) {
  std::string wanted = absl::AsciiStrToLower(absl::StripAsciiWhitespace(name));
  for (const auto& [alias, target] : PresetAliases()) {
    if (wanted == alias) {
      wanted = target;
    }
  }
  for (const auto& preset : AllPresets()) {
    if (preset.name == wanted) {
      return &preset;
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown preset '", name, "'; valid presets: ", ValidPresetNames()));
}

}  // namespace ddo
