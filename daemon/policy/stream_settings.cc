// File: daemon/policy/stream_settings.cc
#include "daemon/policy/stream_settings.h"

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "daemon/common/status_macros.h"
#include "daemon/config/module_patterns.h"
#include "daemon/config/setting_catalog.h"
#include "daemon/config/values.h"
#include "ddo/wire/display_text.h"

namespace ddo {
namespace {

absl::StatusOr<uint64_t> GiBSetting(const std::string& name, const std::string& text) {
  absl::StatusOr<double> gib = ParseNonNegativeNumber(name, text);
  if (!gib.ok()) return gib.status();
  return GiBToBytes(*gib);
}

// A comma-separated list of patterns (and "auto" where `auto_allowed`), each checked
// (module_patterns.h: RE2 syntax, size and count limits).
absl::StatusOr<std::vector<std::string>> ParseRegexList(const std::string& name,
                                                       absl::string_view text, bool auto_allowed) {
  std::vector<std::string> patterns;
  for (absl::string_view pattern : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    DDO_RETURN_IF_ERROR(CheckModulePatternCount(name, patterns.size() + 1));
    const std::string trimmed(absl::StripAsciiWhitespace(pattern));
    if (auto_allowed && absl::AsciiStrToLower(trimmed) == "auto") {
      patterns.push_back("auto");
      continue;
    }
    DDO_RETURN_IF_ERROR(CheckModulePattern(name, patterns.size(), trimmed));
    patterns.push_back(trimmed);
  }
  return patterns;
}

// A numeric or choice library setting that ParseStreamSettings does not read itself (the
// resident policy reads several numbers; DDO_FUSED_LORA is the client's): refused when outside
// the catalog's range or choices, so that no later conversion to bytes overflows and the client
// never meets a value it does not know.
absl::Status CheckCatalogValue(const std::string& name, const std::string& text) {
  const SettingSpec* spec = FindLibrarySetting(name);
  if (spec == nullptr || (spec->type != SettingType::kInt && spec->type != SettingType::kNumber &&
                          spec->type != SettingType::kChoice)) {
    return absl::OkStatus();
  }
  if (spec->type != SettingType::kChoice &&
      (text.empty() || absl::AsciiStrToLower(text) == "auto")) {
    return absl::OkStatus();
  }
  return NormalizeSetting(*spec, name, text).status();
}

}  // namespace

absl::StatusOr<StreamSettings> ParseStreamSettings(
    const std::map<std::string, std::string>& values) {
  StreamSettings settings;
  settings.always_resident_patterns = {kDefaultAlwaysResidentPattern};
  for (const auto& [name, raw] : values) {
    const std::string text(absl::StripAsciiWhitespace(raw));
    const std::string lower = absl::AsciiStrToLower(text);
    if (name == "DDO_STREAM_UNIT") {
      if (lower == "linear") {
        settings.grouping = UnitGrouping::kLinear;
      } else if (lower == "block") {
        settings.grouping = UnitGrouping::kBlock;
      } else {
        return absl::InvalidArgumentError(absl::StrCat(
            "DDO_STREAM_UNIT='", EscapeForDisplay(text), "' must be 'linear' or 'block'"));
      }
    } else if (name == "DDO_RING_SLOTS") {
      uint32_t slots = 0;
      if (!text.empty() && (!absl::SimpleAtoi(text, &slots) || slots < 2 || slots > kMaxRingSlots)) {
        return absl::InvalidArgumentError(absl::StrCat("DDO_RING_SLOTS='", EscapeForDisplay(text),
                                                       "' must be a whole number from 2 to ",
                                                       kMaxRingSlots));
      }
      settings.ring_slots = slots;
    } else if (name == "DDO_VRAM_BUDGET_GB") {
      if (text.empty() || text == "0") continue;
      absl::StatusOr<uint64_t> bytes = GiBSetting(name, text);
      if (!bytes.ok()) return bytes.status();
      settings.vram_budget_bytes = *bytes;
    } else if (name == "DDO_ACTIVATION_RESERVE_GB") {
      absl::StatusOr<uint64_t> bytes = GiBSetting(name, text);
      if (!bytes.ok()) return bytes.status();
      settings.activation_reserve_bytes = *bytes;
    } else if (name == "DDO_RESIDENT_MODULE_BUDGET_GB") {
      if (lower.empty() || lower == "auto") continue;
      absl::StatusOr<uint64_t> bytes = GiBSetting(name, text);
      if (!bytes.ok()) return bytes.status();
      settings.resident_budget_bytes = *bytes;
    } else if (name == "DDO_RESIDENT_MODULE_SELECTION") {
      if (lower == "auto") {
        settings.selection = ResidentSelection::kAuto;
      } else if (lower == "compute") {
        settings.selection = ResidentSelection::kCompute;
      } else if (lower == "spread") {
        settings.selection = ResidentSelection::kSpread;
      } else if (lower == "first") {
        settings.selection = ResidentSelection::kFirst;
      } else if (lower == "largest") {
        settings.selection = ResidentSelection::kLargest;
      } else {
        return absl::InvalidArgumentError(
            absl::StrCat("DDO_RESIDENT_MODULE_SELECTION='", EscapeForDisplay(text),
                         "' must be 'auto', 'compute', 'spread', 'first' or 'largest'"));
      }
    } else if (name == "DDO_SMALL_TENSOR_THRESHOLD_KB") {
      const SettingSpec* spec = FindLibrarySetting(name);
      DDO_ASSIGN_OR_RETURN(const double kib,
                           ParseNumberInRange(name, text, spec->min_value, spec->max_value));
      settings.small_tensor_bytes = static_cast<uint64_t>(kib * 1024.0);
    } else if (name == "DDO_RESIDENT_MODULE_PATTERNS") {
      DDO_ASSIGN_OR_RETURN(settings.resident_module_patterns,
                           ParseRegexList(name, text, /*auto_allowed=*/true));
    } else if (name == "DDO_ALWAYS_RESIDENT_MODULE_PATTERNS") {
      DDO_ASSIGN_OR_RETURN(settings.always_resident_patterns,
                           ParseRegexList(name, text, /*auto_allowed=*/false));
    } else {
      DDO_RETURN_IF_ERROR(CheckCatalogValue(name, text));
    }
  }
  return settings;
}

}  // namespace ddo
