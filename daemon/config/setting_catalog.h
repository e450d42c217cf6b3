// File: daemon/config/setting_catalog.h
//
// Every DDO_* setting a request can carry (docs/configuration.md §1 and §10, plus the streaming
// session settings of docs/streaming.md): its type, default, valid values and meaning, and the
// one place where a raw value is checked and normalised. The policy resolves values against
// this table; docs/configuration.md prints it.
//
// Thread-safety: immutable after static initialisation.
#ifndef DDO_DAEMON_CONFIG_SETTING_CATALOG_H_
#define DDO_DAEMON_CONFIG_SETTING_CATALOG_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ddo {

enum class SettingType {
  kBool,    // the seed's rule: true only for 1/true/yes/on; normalised to "1"/"0"
  kInt,     // a whole number from min_value to max_value
  kNumber,  // a finite number from min_value to max_value (GiB, ratios, KiB)
  kChoice,  // one of `choices` (case-insensitive; aliases map onto a choice)
  kList,    // items split on ',' or ';', trimmed, empty items dropped; normalised to "a,b";
            // the *_PATTERNS lists hold RE2 patterns (module_patterns.h: their limits)
  kText,    // free text (names, paths)
};

struct SettingSpec {
  std::string name;  // "DDO_PIN_CPU_MEMORY", or a component suffix "OFFLOAD_TYPE"
  SettingType type = SettingType::kText;
  // The built-in default, normalised; "" where the default is "not set" (detected, derived).
  std::string default_value;
  std::vector<std::string> choices;
  // alias -> choice, for kChoice.
  std::vector<std::pair<std::string, std::string>> aliases;
  std::string meaning;
  // kInt and kNumber: the valid range, inclusive (documented beside the setting; a value out
  // of it is refused, so that no size overflows when converted to bytes).
  double min_value = 0;
  double max_value = 0;
};

// The library settings (one per DDO_* name), in documentation order.
const std::vector<SettingSpec>& LibrarySettings();
// The per-component suffixes: DDO_<C>_<SUFFIX> and DDO_RUNNER_<C>_<SUFFIX>.
const std::vector<SettingSpec>& ComponentSettings();

// nullptr when `name` is not a library setting. DDO_PURGE_WINDOWS_STANDBY_<PHASE> names match
// the one family entry.
const SettingSpec* FindLibrarySetting(absl::string_view name);
const SettingSpec* FindComponentSetting(absl::string_view suffix);

// Checks and normalises `raw` for `spec`. InvalidArgument names `name` (the variable as the
// user wrote it), the value (a short escaped prefix of it), and what is valid (the range of a
// number; for a pattern list, the index of the bad pattern).
absl::StatusOr<std::string> NormalizeSetting(const SettingSpec& spec, absl::string_view name,
                                             absl::string_view raw);

// The seed's component prefix: uppercase, runs of other characters than A-Z and 0-9 replaced
// by '_', outer '_' trimmed, "MODEL" when nothing is left ("text_encoder-2" -> TEXT_ENCODER_2).
std::string ComponentPrefix(absl::string_view component);

// A route name or alias ("group", "ddo", "off", ...) -> "auto", "dynamic_offload",
// "diffusers_group_offload" or "none".
absl::StatusOr<std::string> CanonicalRoute(absl::string_view name, absl::string_view variable);

// The DDO_* entries of an environment that name a setting (library or per component), except
// DDO_PRESET: what ddod keeps of its own environment as a layer of ResolveSettings.
std::map<std::string, std::string> SettingVariables(
    const std::map<std::string, std::string, std::less<>>& environment);

}  // namespace ddo

#endif  // DDO_DAEMON_CONFIG_SETTING_CATALOG_H_
