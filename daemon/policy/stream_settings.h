// File: daemon/policy/stream_settings.h
//
// The settings of one streaming session, parsed from the DDO_* values the runner sent (its
// resolved settings, docs/streaming.md §1): how weights group into units, the ring's size,
// the VRAM and resident budgets, which modules stay resident. Parsing checks every value it
// reads and every other numeric or choice library setting present against the catalog
// (setting_catalog.h), so that a later conversion never meets a value out of range.
//
// Thread-safety: pure functions.
#ifndef DDO_DAEMON_POLICY_STREAM_SETTINGS_H_
#define DDO_DAEMON_POLICY_STREAM_SETTINGS_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace ddo {

enum class UnitGrouping { kLinear, kBlock };
// DDO_RESIDENT_MODULE_SELECTION. kAuto: kCompute when the component's rows are known (a
// learning forward reported them), else kSpread. kCompute: single weights of the candidate
// blocks, least compute per byte first (session_planner.h); the others choose whole blocks.
enum class ResidentSelection { kAuto, kCompute, kSpread, kFirst, kLargest };

struct StreamSettings {
  UnitGrouping grouping = UnitGrouping::kLinear;
  // The ring's arena in units of the largest unit (DDO_RING_SLOTS); 0: the grouping's default.
  uint32_t ring_slots = 0;
  std::optional<uint64_t> vram_budget_bytes;
  uint64_t activation_reserve_bytes = 2ull << 30;
  std::optional<uint64_t> resident_budget_bytes;  // unset: auto
  ResidentSelection selection = ResidentSelection::kAuto;
  uint64_t small_tensor_bytes = 1024ull << 10;
  std::vector<std::string> always_resident_patterns;
  // DDO_RESIDENT_MODULE_PATTERNS: which whole modules the resident budget may keep. Empty: every
  // repeated block (ddod's rule); "auto": the seed's inferred block pattern, the repeated group
  // with the most bytes; other entries are regexes of module paths (re.search, RE2 syntax,
  // bounded as module_patterns.h says).
  std::vector<std::string> resident_module_patterns;
};

inline constexpr char kDefaultAlwaysResidentPattern[] =
    "(^|\\.)(proj_in|time_embed|prompt_adaln|norm_out|proj_out)(\\.|$)";

// DDO_RING_SLOTS: the arena's size in largest units, at most.
inline constexpr uint32_t kMaxRingSlots = 64;

// InvalidArgument naming the setting and the value (a short escaped prefix). Patterns are
// checked as module_patterns.h says; the numbers this reads, and every other numeric library
// setting present (setting_catalog.h), must be finite and inside their documented range.
// Unknown names are ignored (they may be meant for the runner or for another route).
absl::StatusOr<StreamSettings> ParseStreamSettings(const std::map<std::string, std::string>& values);

}  // namespace ddo

#endif  // DDO_DAEMON_POLICY_STREAM_SETTINGS_H_
