// File: daemon/config/presets.h
//
// The preset table of the seed (docs/configuration.md §9): each preset is a flat map from a
// DDO_* variable to its value. "auto" is an alias that resolves to "one_shot_fast" on every
// platform; platform rules (WSL pinning, ...) are applied after resolution, by the policy.
//
// Thread-safety: everything here is immutable after static initialisation.
#ifndef DDO_DAEMON_CONFIG_PRESETS_H_
#define DDO_DAEMON_CONFIG_PRESETS_H_

#include <optional>
#include <string>
#include "absl/strings/string_view.h"
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace ddo {

struct PresetDefinition {
  std::string name;
  std::string description;
  // DDO_* variable -> value, in the seed's table order.
  std::vector<std::pair<std::string, std::string>> values;

  // The preset's value for `variable`, or nullopt when the preset leaves it to the default.
  std::optional<std::string> Find(absl::string_view variable) const;
};

// Every preset, in the order `ddoctl presets` prints them.
const std::vector<PresetDefinition>& AllPresets();

// Aliases ("auto" -> "one_shot_fast").
const std::vector<std::pair<std::string, std::string>>& PresetAliases();

// The preset ddod runs with when neither --preset nor DDO_PRESET is given.
inline constexpr char kDefaultDaemonPreset[] = "auto";

// Resolves a preset name or alias (case-insensitive, trimmed) to its definition.
// An unknown name is InvalidArgument listing the valid names.
absl::StatusOr<const PresetDefinition*> ResolvePreset(absl::string_view name);

// "auto, one_shot_fast, low_ram_safe, ..." for error messages and --help.
std::string ValidPresetNames();

}  // namespace ddo

#endif  // DDO_DAEMON_CONFIG_PRESETS_H_
