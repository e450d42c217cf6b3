// File: daemon/config/setting_catalog.cc
#include "daemon/config/setting_catalog.h"

#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "daemon/config/module_patterns.h"
#include "daemon/config/values.h"
#include "ddo/wire/display_text.h"

namespace ddo {
namespace {

constexpr char kPurgePrefix[] = "DDO_PURGE_WINDOWS_STANDBY_";
constexpr char kDefaultAlwaysResident[] =
    "(^|\\.)(proj_in|time_embed|prompt_adaln|norm_out|proj_out)(\\.|$)";

SettingSpec Bool(std::string name, bool value, std::string meaning) {
  return {std::move(name), SettingType::kBool, value ? "1" : "0", {}, {}, std::move(meaning)};
}
// Ranges of the numeric settings.
constexpr double kMaxWorkers = 256;
constexpr double kMaxThresholdKiB = 1048576;  // 1 GiB
constexpr double kMaxModelToVramRatio = 1024;
constexpr double kMinRingSlots = 2;
constexpr double kMaxRingSlots = 64;  // session_plan.cc's bound
constexpr double kMaxBlocksPerGroup = 65536;

SettingSpec Int(std::string name, std::string value, std::string meaning, double min, double max) {
  return {std::move(name), SettingType::kInt, std::move(value), {}, {}, std::move(meaning), min,
          max};
}
SettingSpec Number(std::string name, std::string value, std::string meaning, double min = 0,
                   double max = kMaxGiB) {
  return {std::move(name), SettingType::kNumber, std::move(value), {}, {}, std::move(meaning),
          min, max};
}
SettingSpec Choice(std::string name, std::string value, std::vector<std::string> choices,
                   std::string meaning) {
  return {std::move(name), SettingType::kChoice, std::move(value), std::move(choices), {},
          std::move(meaning)};
}
SettingSpec List(std::string name, std::string value, std::string meaning) {
  return {std::move(name), SettingType::kList, std::move(value), {}, {}, std::move(meaning)};
}
SettingSpec Text(std::string name, std::string value, std::string meaning) {
  return {std::move(name), SettingType::kText, std::move(value), {}, {}, std::move(meaning)};
}

std::vector<SettingSpec> BuildLibrarySettings() {
  return {
      Text("DDO_PRESET", "", "preset name or alias; in the client's environment it overrides the preset= argument"),
      Bool("DDO_PLAN", false, "enable DDO even in plan mode (plan-only hook)"),
      Choice("DDO_EXECUTION_MODE", "plan", {"plan", "linear_runtime", "sdnq_runtime"},
             "plan only, or stream dense Linear weights; sdnq_runtime is accepted for the seed's runners and streams as linear_runtime (SDNQ modules go to Diffusers group offload)"),
      Choice("DDO_LINEAR_RUNTIME_STRATEGY", "functional", {"functional", "swap"},
             "the seed's choice of how a patched Linear gets its weight; accepted and reported: a streamed Linear always takes its weight from the ring"),
      Bool("DDO_PIN_CPU_MEMORY", false, "page-lock the host copy of the weights"),
      Bool("DDO_ALLOW_PIN_MEMORY_FALLBACK", true, "continue unpinned when pinning fails"),
      Bool("DDO_DISABLE_PIN_ON_WSL", true, "never pin on WSL, and no group-offload streams there"),
      Int("DDO_PIN_CPU_WORKERS", "4", "threads that pin (pre-touch) weights", 1, kMaxWorkers),
      Bool("DDO_CACHE_PLAN", true, "reuse plans across calls with the same structure"),
      Bool("DDO_CACHE_PINNED_WEIGHTS", false, "keep pinned weights for the next runner (warm cache)"),
      Text("DDO_PINNED_WEIGHT_CACHE_NAMESPACE", "", "cache namespace; empty: the module class's qualified name"),
      Choice("DDO_AUTO_BUDGET_POLICY", "off", {"off", "balanced"}, "the RAM/VRAM-aware planner"),
      Number("DDO_MAX_RESIDENT_MODULE_BUDGET_GB", "6", "cap on the automatic resident budget; 0: uncapped"),
      Number("DDO_AUTO_VRAM_HEADROOM_GB", "0", "VRAM the automatic budget leaves free; 0: the built-in table"),
      Number("DDO_PROFILE_VRAM_HEADROOM_GB", "1", "margin of a calibration run's resident budget"),
      Bool("DDO_PROFILE_CALIBRATION", false,
           "set by build_profile for its session: nothing resident that can stream (no budget, no always-resident patterns), whatever the policy"),
      Number("DDO_PROFILE_RESIDENT_MODULE_BUDGET_GB", "0",
             "set by a named profile (its measured recommendation) for the balanced planner; 0: none"),
      Number("DDO_AUTO_FULL_PIN_MIN_MODEL_TO_VRAM_RATIO", "4",
             "model/VRAM ratio from which the planner pins everything and keeps nothing resident; 0: never",
             0, kMaxModelToVramRatio),
      Number("DDO_MAX_PIN_WEIGHT_BUDGET_GB", "0", "cap on the pin budget; 0: uncapped"),
      Number("DDO_AVAILABLE_SYSTEM_RAM_GB", "", "pretend this much RAM is available (simulations); unset: detected"),
      Number("DDO_SYSTEM_RAM_HEADROOM_GB", "6", "RAM kept out of pinning decisions"),
      Number("DDO_PIN_WEIGHT_BUDGET_GB", "0", "explicit pin budget; 0: none"),
      Number("DDO_PIN_WEIGHT_BUDGET_RATIO", "0", "fraction of candidate bytes to pin; 0: none", 0, 1),
      Choice("DDO_PIN_WEIGHT_SELECTION", "spread", {"first", "spread", "largest"}, "which weights fill the pin budget"),
      Number("DDO_RESIDENT_MODULE_BUDGET_GB", "0", "explicit resident budget; wins over the automatic one and profiles"),
      List("DDO_RESIDENT_MODULE_PATTERNS", "", "regexes of resident candidates; 'auto' infers the repeated block pattern"),
      Choice("DDO_RESIDENT_MODULE_SELECTION", "auto", {"auto", "compute", "first", "spread", "largest"}, "which blocks or weights fill the resident budget; auto: least compute per byte once a forward was seen, else spread"),
      List("DDO_ALWAYS_RESIDENT_MODULE_PATTERNS", kDefaultAlwaysResident, "modules always kept whole on the device"),
      Int("DDO_SMALL_TENSOR_THRESHOLD_KB", "1024", "tensors up to this size stay resident", 0,
          kMaxThresholdKiB),
      Choice("DDO_LOAD_SAFETENSORS_BACKEND", "", {"", "mmap", "pread"}, "how safetensors files are read"),
      Choice("DDO_SAFETENSORS_BACKEND", "", {"", "mmap", "pread"}, "alias of DDO_LOAD_SAFETENSORS_BACKEND, used when that one is empty"),
      Bool("DDO_VERBOSE", false, "extra setup output"),
      Bool("DDO_SHOW_PROFILE", false, "reported only: the runner prints the profile"),
      Text("DDO_PROFILE_DIR", "~/.ddo/profiles", "where capacity profiles live"),
      Bool("DDO_PURGE_WINDOWS_STANDBY_<PHASE>", false,
           "purge the Windows standby list at a phase (BEFORE_RUN, AFTER_TEXT_ENCODER, BEFORE_TRANSFORMER, ...)"),
      Choice("DDO_STREAM_UNIT", "linear", {"linear", "block"}, "streaming unit: one Linear weight or a whole block"),
      Choice("DDO_FUSED_LORA", "on_arrival", {"on_arrival", "stored"},
             "how fuse_lora reaches a streamed Linear: added to its weight on the device as the weight arrives (switching LoRAs uploads nothing), or stored in ddod as a derived version (no work per step)"),
      Int("DDO_RING_SLOTS", "", "streaming ring size in largest units (2-64); smaller units pack in; unset: 8 for linear units, 3 for blocks",
          kMinRingSlots, kMaxRingSlots),
      Number("DDO_VRAM_BUDGET_GB", "", "everything a streaming session may use on its device; unset: no session cap"),
      Number("DDO_ACTIVATION_RESERVE_GB", "2", "kept free for the runner's activations inside DDO_VRAM_BUDGET_GB"),
      Choice("DDO_RESIDENT_BUDGET_RULE", "bandwidth", {"bandwidth", "seed"},
             "balanced policy on a GPU: bandwidth takes whichever plan copies fewer bytes per pass, the seed's budget or all the VRAM that the larger of the headroom and the activation reserve leaves; seed: the seed's capped budget"),
  };
}

std::vector<SettingSpec> BuildComponentSettings() {
  SettingSpec route = Choice("ROUTE", "auto",
                             {"auto", "dynamic_offload", "diffusers_group_offload", "none"},
                             "which offload route the component takes");
  route.aliases = {{"diffusers", "diffusers_group_offload"},
                   {"diffusers_group", "diffusers_group_offload"},
                   {"group", "diffusers_group_offload"},
                   {"group_offload", "diffusers_group_offload"},
                   {"dynamic", "dynamic_offload"},
                   {"ddo", "dynamic_offload"},
                   {"cuda", "none"},
                   {"standard", "none"},
                   {"off", "none"}};
  SettingSpec dynamic = Bool("DYNAMIC_OFFLOAD", false, "enable or disable the DDO route; unset: DDO is enabled by the execution mode");
  dynamic.default_value = "";
  return {
      route,
      Bool("GROUP_OFFLOAD", false, "force the Diffusers group-offload route"),
      dynamic,
      Bool("OFFLOAD_STREAM", true, "group offload use_stream"),
      Bool("OFFLOAD_RECORD_STREAM", false, "group offload record_stream"),
      Choice("OFFLOAD_TYPE", "leaf_level", {"leaf_level", "block_level"}, "group offload offload_type"),
      Bool("OFFLOAD_LOW_CPU_MEM_USAGE", true, "group offload low_cpu_mem_usage"),
      Int("NUM_BLOCKS_PER_GROUP", "1", "group offload num_blocks_per_group (block_level only)", 1,
          kMaxBlocksPerGroup),
  };
}

}  // namespace

const std::vector<SettingSpec>& LibrarySettings() {
  static const auto* settings = new std::vector<SettingSpec>(BuildLibrarySettings());
  return *settings;
}

const std::vector<SettingSpec>& ComponentSettings() {
  static const auto* settings = new std::vector<SettingSpec>(BuildComponentSettings());
  return *settings;
}

const SettingSpec* FindLibrarySetting(absl::string_view name) {
  for (const SettingSpec& spec : LibrarySettings()) {
    if (spec.name == name) return &spec;
  }
  if (absl::StartsWith(name, kPurgePrefix) && name.size() > sizeof(kPurgePrefix) - 1) {
    return FindLibrarySetting("DDO_PURGE_WINDOWS_STANDBY_<PHASE>");
  }
  return nullptr;
}

const SettingSpec* FindComponentSetting(absl::string_view suffix) {
  for (const SettingSpec& spec : ComponentSettings()) {
    if (spec.name == suffix) return &spec;
  }
  return nullptr;
}

absl::StatusOr<std::string> NormalizeSetting(const SettingSpec& spec, absl::string_view name,
                                             absl::string_view raw) {
  const std::string text(absl::StripAsciiWhitespace(raw));
  switch (spec.type) {
    case SettingType::kBool:
      return std::string(ParseSeedBool(text) ? "1" : "0");
    case SettingType::kInt: {
      uint64_t value = 0;
      if (text.empty() && spec.default_value.empty()) return std::string();
      if (!absl::SimpleAtoi(text, &value)) {
        return absl::InvalidArgumentError(
            absl::StrCat(name, "='", EscapeForDisplay(text), "' is not a whole number >= 0"));
      }
      if (static_cast<double>(value) < spec.min_value ||
          static_cast<double>(value) > spec.max_value) {
        return absl::InvalidArgumentError(
            absl::StrCat(name, "='", EscapeForDisplay(text),
                         "' is out of range: a whole number from ", FormatNumber(spec.min_value),
                         " to ", FormatNumber(spec.max_value)));
      }
      return absl::StrCat(value);
    }
    case SettingType::kNumber: {
      if (text.empty() && spec.default_value.empty()) return std::string();
      absl::StatusOr<double> value =
          ParseNumberInRange(name, text, spec.min_value, spec.max_value);
      if (!value.ok()) return value.status();
      return absl::StrCat(*value);
    }
    case SettingType::kChoice: {
      const std::string lower = absl::AsciiStrToLower(text);
      for (const std::string& choice : spec.choices) {
        if (choice == lower) return choice;
      }
      for (const auto& [alias, choice] : spec.aliases) {
        if (alias == lower) return choice;
      }
      std::vector<std::string> valid;
      for (const std::string& choice : spec.choices) valid.push_back(choice.empty() ? "''" : choice);
      for (const auto& alias : spec.aliases) valid.push_back(alias.first);
      return absl::InvalidArgumentError(absl::StrCat(
          name, "='", EscapeForDisplay(text), "' must be one of ", absl::StrJoin(valid, ", ")));
    }
    case SettingType::kList: {
      const bool patterns = absl::StrContains(spec.name, "PATTERNS");
      std::vector<std::string> items;
      for (absl::string_view item : absl::StrSplit(text, absl::ByAnyChar(",;"))) {
        item = absl::StripAsciiWhitespace(item);
        if (item.empty()) continue;
        if (patterns) {
          if (absl::Status count = CheckModulePatternCount(name, items.size() + 1); !count.ok()) {
            return count;
          }
          if (item != "auto") {
            if (absl::Status valid = CheckModulePattern(name, items.size(), item); !valid.ok()) {
              return valid;
            }
          }
        }
        items.emplace_back(item);
      }
      return absl::StrJoin(items, ",");
    }
    case SettingType::kText:
      return text;
  }
  return text;
}

std::string ComponentPrefix(absl::string_view component) {
  std::string prefix;
  bool pending_underscore = false;
  for (char c : component) {
    const char upper = absl::ascii_toupper(static_cast<unsigned char>(c));
    if ((upper >= 'A' && upper <= 'Z') || (upper >= '0' && upper <= '9')) {
      if (pending_underscore && !prefix.empty()) prefix += '_';
      pending_underscore = false;
      prefix += upper;
    } else {
      pending_underscore = true;
    }
  }
  return prefix.empty() ? "MODEL" : prefix;
}

absl::StatusOr<std::string> CanonicalRoute(absl::string_view name, absl::string_view variable) {
  return NormalizeSetting(*FindComponentSetting("ROUTE"), variable, name);
}

std::map<std::string, std::string> SettingVariables(
    const std::map<std::string, std::string, std::less<>>& environment) {
  std::map<std::string, std::string> kept;
  for (const auto& [name, value] : environment) {
    if (!absl::StartsWith(name, "DDO_") || name == "DDO_PRESET") continue;
    bool known = FindLibrarySetting(name) != nullptr;
    for (const SettingSpec& spec : ComponentSettings()) {
      if (absl::EndsWith(name, absl::StrCat("_", spec.name))) known = true;
    }
    if (known) kept[name] = value;
  }
  return kept;
}

}  // namespace ddo
