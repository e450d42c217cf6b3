// File: daemon/stream/session_plan.h
//
// The placement of one streaming session: which tensors sit in the resident slab, how the
// streamed weights group into units, and how large the ring is. Rules (docs/streaming.md §1):
// tensors the runner cannot stream, small weights and always-resident modules are resident;
// the rest is streamed per Linear or per repeated block; under the resident budget whole
// blocks are made resident, spread evenly as in the seed. Every decision is recorded with its
// reason.
#ifndef DDO_DAEMON_STREAM_SESSION_PLAN_H_
#define DDO_DAEMON_STREAM_SESSION_PLAN_H_

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "daemon/store/tensor_table.h"

namespace ddo {

enum class UnitGrouping { kLinear, kBlock };
enum class ResidentSelection { kSpread, kFirst, kLargest };

// Per-session settings, from AttachRequest.settings (DDO_* names).
struct StreamSettings {
  UnitGrouping grouping = UnitGrouping::kLinear;
  // The ring's arena in units of the largest unit (DDO_RING_SLOTS); 0: the grouping's default.
  uint32_t ring_slots = 0;
  std::optional<uint64_t> vram_budget_bytes;
  uint64_t activation_reserve_bytes = 2ull << 30;
  std::optional<uint64_t> resident_budget_bytes;  // unset: auto
  ResidentSelection selection = ResidentSelection::kSpread;
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

// InvalidArgument naming the setting and the value (a short escaped prefix). Patterns are
// checked as module_patterns.h says; the numbers this reads, and every other numeric library
// setting present (setting_catalog.h), must be finite and inside their documented range.
// Unknown names are ignored (they may be meant for the runner or for another route).
absl::StatusOr<StreamSettings> ParseStreamSettings(const std::map<std::string, std::string>& values);

struct PlannedTensor {
  uint32_t table_index = 0;  // into the component's tensor table
  uint64_t offset = 0;       // in the slab, or from the start of its unit
};

struct StreamUnit {
  std::string name;  // the block ("transformer_blocks.3") or the Linear's module path
  uint64_t span_bytes = 0;    // bytes it occupies in a slot (with alignment)
  uint64_t tensor_bytes = 0;  // bytes copied
  std::vector<PlannedTensor> tensors;
};

struct PlanDecisionEntry {
  std::string key;
  std::string value;
  std::string reason;
};

struct SessionPlan {
  std::vector<PlannedTensor> resident;
  uint64_t slab_bytes = 0;
  uint64_t resident_bytes = 0;  // tensor bytes in the slab
  std::vector<StreamUnit> units;
  // The ring: an arena that packs the units streaming the schedule (each at its own offset,
  // so small units do not take a slot of the largest one), then one slot of the largest unit
  // for out-of-schedule uses.
  uint64_t slot_bytes = 0;   // the largest unit
  uint64_t arena_bytes = 0;  // DDO_RING_SLOTS x slot_bytes
  uint32_t ring_slots = 0;   // units in flight at most; slot ring_slots is the out-of-schedule one
  uint64_t streamed_bytes = 0;  // tensor bytes of all units
  std::vector<PlanDecisionEntry> decisions;
  // Identifies the units (names and grouping): a schedule learned for one plan fits another
  // with the same signature.
  std::string signature;
  // Identifies the slab's contents (which tensors, where): a warm slab with the same
  // signature, of the same component bytes, can serve another session.
  std::string slab_signature;

  uint64_t ring_bytes() const { return arena_bytes + slot_bytes; }
  uint64_t device_bytes() const { return slab_bytes + ring_bytes(); }
};

// The block of each module path: the outermost "<prefix>.<digits>" whose prefix has at least
// two distinct indices among the paths ("transformer_blocks.3", not
// "transformer_blocks.3.ff.net.2"); "" when none.
std::map<std::string, std::string> BlocksOf(const std::vector<std::string>& module_paths);

// The whole module the resident budget may keep for each module path ("" when none), by
// DDO_RESIDENT_MODULE_PATTERNS (StreamSettings::resident_module_patterns): the outermost
// prefix of the path that a pattern matches. "auto" adds the seed's inferred pattern
// ^<prefix>\.\d+$ of the repeated group with the most bytes (`bytes[i]`: the bytes of
// module_paths[i]; ties: more members). `described` gets the patterns in use. Paths longer
// than kMaxModulePathBytes get "" (never matched). InvalidArgument for a pattern that
// ParseStreamSettings would have refused.
absl::StatusOr<std::map<std::string, std::string>> ResidentCandidatesOf(
    const std::vector<std::string>& module_paths, const std::vector<uint64_t>& bytes,
    const std::vector<std::string>& patterns, std::string* described);

// Plans a session. `streamable` names tensors of `tensors`; each must be a 2-D floating
// ".weight" with a name of at most kMaxModulePathBytes (InvalidArgument otherwise). ResourceExhausted when the VRAM budget cannot hold the
// resident tensors, the ring and the activation reserve.
absl::StatusOr<SessionPlan> PlanSession(const std::vector<TensorEntry>& tensors,
                                        const std::set<std::string>& streamable,
                                        const StreamSettings& settings);

}  // namespace ddo

#endif  // DDO_DAEMON_STREAM_SESSION_PLAN_H_
