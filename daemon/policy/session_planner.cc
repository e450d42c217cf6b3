// File: daemon/policy/session_planner.cc
#include "daemon/policy/session_planner.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "daemon/common/format_bytes.h"
#include "daemon/common/status_macros.h"
#include "daemon/common/xxh3_hasher.h"
#include "daemon/config/module_patterns.h"
#include "daemon/policy/module_blocks.h"
#include "ddo/wire/display_text.h"

namespace ddo {
namespace {

// Units in flight at most (each slot has a use, an offset and two interprocess events).
constexpr uint64_t kMaxSlotsInFlight = 128;

uint64_t AlignUp(uint64_t value, uint64_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
}

// "a.b.weight" -> "a.b"; "weight" (the component is the Linear) -> "".
std::string ModulePathOfWeight(const std::string& name) {
  return name == "weight" ? std::string() : name.substr(0, name.size() - 7);
}

// Appends decisions to a plan.
class DecisionLog {
 public:
  explicit DecisionLog(SessionPlan& plan) : plan_(plan) {}
  void operator()(std::string key, std::string value, std::string reason) {
    plan_.decisions.push_back({std::move(key), std::move(value), std::move(reason)});
  }

 private:
  SessionPlan& plan_;
};

// Every streamable name is bounded, in the table and a 2-D floating Linear weight.
absl::Status CheckStreamable(const std::vector<TensorEntry>& tensors,
                             const std::set<std::string>& streamable) {
  std::map<std::string, uint32_t> index_of;
  for (uint32_t i = 0; i < tensors.size(); ++i) index_of[tensors[i].name] = i;
  for (const std::string& name : streamable) {
    if (name.size() > kMaxModulePathBytes) {
      // Names are matched against the client's patterns prefix by prefix: bounded first.
      return absl::InvalidArgumentError(absl::StrCat(
          "streamable tensor '", EscapeForDisplay(name), "' has a name of ", name.size(),
          " bytes, at most ", kMaxModulePathBytes, " allowed"));
    }
    auto it = index_of.find(name);
    if (it == index_of.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "streamable tensor '", EscapeForDisplay(name), "' is not in the component"));
    }
    const TensorEntry& tensor = tensors[it->second];
    // "<path>.weight", or "weight" when the component itself is the Linear.
    const bool weight_name =
        name == "weight" || (name.size() > 7 && name.compare(name.size() - 7, 7, ".weight") == 0);
    if (tensor.shape.size() != 2 || !IsFloatingPoint(tensor.dtype) || !weight_name) {
      return absl::InvalidArgumentError(absl::StrCat(
          "streamable tensor '", EscapeForDisplay(name), "' is not a 2-D floating Linear weight (shape [",
          absl::StrJoin(tensor.shape, ", "), "], dtype ", SafetensorsDTypeName(tensor.dtype), ")"));
    }
  }
  return absl::OkStatus();
}

// The streamable weights that may stream: neither small nor in an always-resident module.
struct StreamCandidates {
  std::vector<uint32_t> index;      // into the table, in table order
  std::vector<std::string> path;    // the module path of each
  std::vector<uint64_t> bytes;      // the byte size of each
  std::vector<bool> streamed;       // per table entry: streamed (so far)
};

absl::StatusOr<StreamCandidates> FindStreamCandidates(const std::vector<TensorEntry>& tensors,
                                                      const std::set<std::string>& streamable,
                                                      const StreamSettings& settings,
                                                      DecisionLog& decide) {
  DDO_ASSIGN_OR_RETURN(const ModulePatterns always_resident,
                       ModulePatterns::Compile("DDO_ALWAYS_RESIDENT_MODULE_PATTERNS",
                                               settings.always_resident_patterns));
  StreamCandidates found;
  found.streamed.assign(tensors.size(), false);
  uint64_t small_count = 0, small_bytes = 0, pinned_count = 0, pinned_bytes = 0;
  for (uint32_t i = 0; i < tensors.size(); ++i) {
    const TensorEntry& tensor = tensors[i];
    if (streamable.count(tensor.name) == 0) continue;
    std::string module_path = ModulePathOfWeight(tensor.name);
    if (tensor.byte_size <= settings.small_tensor_bytes) {
      ++small_count;
      small_bytes += tensor.byte_size;
      continue;
    }
    if (always_resident.Search(module_path)) {
      ++pinned_count;
      pinned_bytes += tensor.byte_size;
      continue;
    }
    found.index.push_back(i);
    found.path.push_back(std::move(module_path));
    found.bytes.push_back(tensor.byte_size);
    found.streamed[i] = true;
  }
  decide("streamable_weights", absl::StrCat(streamable.size()),
         "dense Linear weights the runner can stream");
  decide("resident_small", absl::StrCat(small_count, " (", FormatBytes(small_bytes), ")"),
         absl::StrCat("at most DDO_SMALL_TENSOR_THRESHOLD_KB=", settings.small_tensor_bytes / 1024));
  decide("resident_always", absl::StrCat(pinned_count, " (", FormatBytes(pinned_bytes), ")"),
         absl::StrCat("modules matching DDO_ALWAYS_RESIDENT_MODULE_PATTERNS=",
                      absl::StrJoin(settings.always_resident_patterns, ",")));
  return found;
}

// The candidates grouped into units: one per Linear, or one per repeated block.
struct UnitGroups {
  std::vector<std::string> name;
  std::vector<std::vector<uint32_t>> members;  // table indices, in table order
};

UnitGroups GroupIntoUnits(const StreamCandidates& candidates, UnitGrouping grouping) {
  const std::map<std::string, std::string> block_of = BlocksOf(candidates.path);
  UnitGroups groups;
  std::map<std::string, size_t> unit_index;
  for (size_t c = 0; c < candidates.index.size(); ++c) {
    const std::string& block = block_of.at(candidates.path[c]);
    const std::string& name =
        grouping == UnitGrouping::kBlock && !block.empty() ? block : candidates.path[c];
    auto [it, inserted] = unit_index.emplace(name, groups.name.size());
    if (inserted) {
      groups.name.push_back(name);
      groups.members.emplace_back();
    }
    groups.members[it->second].push_back(candidates.index[c]);
  }
  return groups;
}

// The whole modules the resident budget may keep, with their streamed bytes, in order of
// appearance.
struct ResidentBlocks {
  std::map<std::string, std::string> of_path;  // module path -> its block ("" when none)
  std::vector<std::string> order;
  std::map<std::string, uint64_t> bytes;
};

absl::StatusOr<ResidentBlocks> FindResidentBlocks(const StreamCandidates& candidates,
                                                  const StreamSettings& settings,
                                                  DecisionLog& decide) {
  ResidentBlocks blocks;
  std::string patterns_in_use;
  DDO_ASSIGN_OR_RETURN(blocks.of_path,
                       ResidentCandidatesOf(candidates.path, candidates.bytes,
                                            settings.resident_module_patterns, &patterns_in_use));
  decide("resident_module_patterns", patterns_in_use,
         settings.resident_module_patterns.empty()
             ? "DDO_RESIDENT_MODULE_PATTERNS not sent: every repeated block is a candidate"
             : absl::StrCat("DDO_RESIDENT_MODULE_PATTERNS=",
                            absl::StrJoin(settings.resident_module_patterns, ",")));
  for (size_t c = 0; c < candidates.index.size(); ++c) {
    const std::string& block = blocks.of_path.at(candidates.path[c]);
    if (block.empty()) continue;
    if (blocks.bytes.count(block) == 0) blocks.order.push_back(block);
    blocks.bytes[block] += candidates.bytes[c];
  }
  return blocks;
}

uint64_t UnitSpan(const std::vector<TensorEntry>& tensors, const std::vector<uint32_t>& members) {
  uint64_t span = 0;
  for (uint32_t i : members) span = AlignUp(span, kTensorAlignment) + tensors[i].byte_size;
  return AlignUp(span, kTensorAlignment);
}

// The arena's size in largest units. Linear units are small: more slots keep the copy engine
// busy across resident stretches.
uint32_t ArenaSlots(const StreamSettings& settings) {
  if (settings.ring_slots != 0) return settings.ring_slots;
  return settings.grouping == UnitGrouping::kBlock ? 3 : 8;
}

// The arena's slots under DDO_VRAM_BUDGET_GB: the default (ArenaSlots) when it fits; where the
// budget cannot hold that many of the largest unit beside the resident tensors and the
// activation reserve, as many as it holds, down to two (still one unit copied while one is
// used): a small card streams with a shorter ring rather than not at all. An explicit
// DDO_RING_SLOTS is kept as asked (ResidentBudget refuses it when it does not fit).
uint32_t FittingArenaSlots(const StreamSettings& settings, uint64_t mandatory_resident,
                           uint64_t largest_unit, DecisionLog& decide) {
  constexpr uint32_t kMinArenaSlots = 2;
  const uint32_t slots = ArenaSlots(settings);
  if (settings.ring_slots != 0 || !settings.vram_budget_bytes || largest_unit == 0) return slots;
  const uint64_t fixed = mandatory_resident + settings.activation_reserve_bytes;
  const uint64_t room = *settings.vram_budget_bytes > fixed ? *settings.vram_budget_bytes - fixed : 0;
  const uint64_t units = room / largest_unit;  // the arena's slots + the out-of-schedule one
  if (units >= slots + 1ull || units < kMinArenaSlots + 1ull) return slots;
  const uint32_t fitting = static_cast<uint32_t>(units - 1);
  decide("ring_slots", absl::StrCat(fitting),
         absl::StrCat("DDO_VRAM_BUDGET_GB ", FormatBytes(*settings.vram_budget_bytes),
                      " leaves room for ", units, " of the largest unit (",
                      FormatBytes(largest_unit), ") beside the resident tensors and the "
                      "activation reserve: fewer than the default ", slots, " + 1"));
  return fitting;
}

// What the resident budget may spend on whole blocks: what DDO_VRAM_BUDGET_GB leaves after
// the tensors that must be resident, the ring and the activation reserve (capped by
// DDO_RESIDENT_MODULE_BUDGET_GB), else that budget, else nothing.
absl::StatusOr<uint64_t> ResidentBudget(const StreamSettings& settings, uint64_t mandatory_resident,
                                        uint32_t slots, uint64_t largest_unit,
                                        DecisionLog& decide) {
  const uint64_t ring_estimate = largest_unit * (slots + 1ull);  // the arena + the extra slot
  uint64_t budget = 0;
  std::string reason;
  if (settings.vram_budget_bytes) {
    const uint64_t needed = mandatory_resident + ring_estimate + settings.activation_reserve_bytes;
    if (needed > *settings.vram_budget_bytes) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "DDO_VRAM_BUDGET_GB=", FormatBytes(*settings.vram_budget_bytes), " cannot hold ",
          FormatBytes(mandatory_resident), " of resident tensors + a ring of ", slots + 1, " x ",
          FormatBytes(largest_unit), " + DDO_ACTIVATION_RESERVE_GB=",
          FormatBytes(settings.activation_reserve_bytes)));
    }
    const uint64_t room = *settings.vram_budget_bytes - needed;
    budget = settings.resident_budget_bytes ? std::min(*settings.resident_budget_bytes, room) : room;
    reason = absl::StrCat("DDO_VRAM_BUDGET_GB ", FormatBytes(*settings.vram_budget_bytes),
                          " - resident tensors ", FormatBytes(mandatory_resident), " - ring ",
                          FormatBytes(ring_estimate), " - activation reserve ",
                          FormatBytes(settings.activation_reserve_bytes),
                          settings.resident_budget_bytes ? ", capped by DDO_RESIDENT_MODULE_BUDGET_GB"
                                                         : "");
  } else if (settings.resident_budget_bytes) {
    budget = *settings.resident_budget_bytes;
    reason = "DDO_RESIDENT_MODULE_BUDGET_GB";
  } else {
    reason = "no DDO_VRAM_BUDGET_GB and no DDO_RESIDENT_MODULE_BUDGET_GB";
  }
  decide("resident_budget", FormatBytes(budget), reason);
  return budget;
}

// The seed's candidate order (docs/seed.md, "The balanced planner").
std::vector<size_t> SelectionOrder(const std::vector<uint64_t>& sizes, uint64_t budget,
                                   ResidentSelection selection) {
  const size_t n = sizes.size();
  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = i;
  if (selection == ResidentSelection::kLargest) {
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return sizes[a] > sizes[b]; });
    return order;
  }
  if (selection == ResidentSelection::kFirst || n <= 2) return order;
  uint64_t total = 0;
  for (uint64_t size : sizes) total += size;
  const double average = static_cast<double>(total) / static_cast<double>(n);
  size_t target = average > 0 ? static_cast<size_t>(static_cast<double>(budget) / average) : n;
  target = std::clamp<size_t>(target, 1, n);
  std::vector<size_t> picked;
  std::vector<bool> taken(n, false);
  if (target == 1) {
    picked.push_back(n / 2);
    taken[n / 2] = true;
  } else {
    for (size_t i = 0; i < target; ++i) {
      const size_t index = static_cast<size_t>(
          std::llround(static_cast<double>(i) * static_cast<double>(n - 1) /
                       static_cast<double>(target - 1)));
      if (!taken[index]) {
        taken[index] = true;
        picked.push_back(index);
      }
    }
  }
  for (size_t i = 0; i < n; ++i) {
    if (!taken[i]) picked.push_back(i);
  }
  return picked;
}

// Whole blocks made resident, greedily in selection order.
std::set<std::string> SelectResidentBlocks(const ResidentBlocks& blocks, uint64_t budget,
                                           ResidentSelection selection, DecisionLog& decide) {
  std::vector<uint64_t> sizes;
  for (const std::string& block : blocks.order) sizes.push_back(blocks.bytes.at(block));
  std::set<std::string> selected;
  uint64_t used = 0;
  if (budget > 0) {
    for (size_t index : SelectionOrder(sizes, budget, selection)) {
      if (used + sizes[index] > budget) continue;
      used += sizes[index];
      selected.insert(blocks.order[index]);
    }
  }
  std::vector<std::string> chosen;
  for (const std::string& block : blocks.order) {
    if (selected.count(block)) chosen.push_back(block);
  }
  decide("selected_resident_module_gb", absl::StrFormat("%.4f", used / (1024.0 * 1024 * 1024)),
         "the seed's name for the bytes of the modules kept whole");
  decide("resident_blocks",
         absl::StrCat(chosen.size(), " of ", blocks.order.size(), " (", FormatBytes(used), ")",
                      chosen.empty() ? "" : ": ", absl::StrJoin(chosen, ", ")),
         selection == ResidentSelection::kSpread  ? "spread evenly (seed rule)"
         : selection == ResidentSelection::kFirst ? "first blocks first"
                                                  : "largest blocks first");
  return selected;
}

// Elements of a 2-D weight: what one row of input costs it, in multiply-adds.
double Elements(const TensorEntry& tensor) {
  double elements = 1;
  for (int64_t extent : tensor.shape) elements *= static_cast<double>(extent);
  return elements;
}

// True when `rows` name a candidate inside a block the resident budget may keep.
bool RowsKnown(const std::vector<TensorEntry>& tensors, const StreamCandidates& candidates,
               const ResidentBlocks& blocks, const WeightRows& rows) {
  for (size_t c = 0; c < candidates.index.size(); ++c) {
    if (!blocks.of_path.at(candidates.path[c]).empty() &&
        rows.count(tensors[candidates.index[c]].name)) {
      return true;
    }
  }
  return false;
}

// Single weights of the candidate blocks made resident, least compute per byte first (rows x
// elements / bytes; ties: larger first). A weight's copy takes bytes / B and its Linear
// computes rows x elements multiply-adds: the weights at the head of this order are those
// whose copies compute cannot hide (a modulation Linear sees one row; a bf16 weight among fp8
// ones costs twice the bytes for the same work), and keeping them leaves streamed the copies
// that overlap best. Weights no learned forward called are not chosen: they are never copied.
void SelectResidentWeights(const std::vector<TensorEntry>& tensors, const ResidentBlocks& blocks,
                           const WeightRows& rows, uint64_t budget, StreamCandidates& candidates,
                           DecisionLog& decide) {
  struct Choice {
    size_t candidate;
    double work_per_byte;
    uint64_t bytes;
  };
  std::vector<Choice> order;
  for (size_t c = 0; c < candidates.index.size(); ++c) {
    if (blocks.of_path.at(candidates.path[c]).empty()) continue;
    const TensorEntry& tensor = tensors[candidates.index[c]];
    auto it = rows.find(tensor.name);
    if (it == rows.end() || tensor.byte_size == 0) continue;
    order.push_back({c, static_cast<double>(it->second) * Elements(tensor) /
                            static_cast<double>(tensor.byte_size),
                     AlignUp(tensor.byte_size, kTensorAlignment)});
  }
  std::stable_sort(order.begin(), order.end(), [](const Choice& a, const Choice& b) {
    if (a.work_per_byte != b.work_per_byte) return a.work_per_byte < b.work_per_byte;
    return a.bytes > b.bytes;
  });
  uint64_t used = 0;
  size_t chosen = 0;
  double last_work = 0;
  for (const Choice& choice : order) {
    if (used + choice.bytes > budget) continue;
    used += choice.bytes;
    ++chosen;
    last_work = choice.work_per_byte;
    candidates.streamed[candidates.index[choice.candidate]] = false;
  }
  decide("selected_resident_module_gb", absl::StrFormat("%.4f", used / (1024.0 * 1024 * 1024)),
         "the seed's name for the bytes the resident budget keeps");
  decide("resident_weights",
         absl::StrCat(chosen, " of ", order.size(), " weights the learned forward used (",
                      FormatBytes(used), "), up to ", absl::StrFormat("%.4g", last_work),
                      " multiply-adds per byte"),
         "DDO_RESIDENT_MODULE_SELECTION=compute (auto, with rows learned from a forward of this "
         "component): least compute per byte first, so that the copies left streamed are those "
         "that compute hides");
}

// The slab: every tensor not streamed, in table order; its signature names what lies where.
void PlaceSlab(const std::vector<TensorEntry>& tensors, const std::vector<bool>& streamed,
               SessionPlan& plan) {
  for (uint32_t i = 0; i < tensors.size(); ++i) {
    if (streamed[i]) continue;
    plan.slab_bytes = AlignUp(plan.slab_bytes, kTensorAlignment);
    plan.resident.push_back({i, plan.slab_bytes});
    plan.slab_bytes += tensors[i].byte_size;
    plan.resident_bytes += tensors[i].byte_size;
  }
  plan.slab_bytes = AlignUp(plan.slab_bytes, kTensorAlignment);
  Xxh3Hasher slab_hash;
  for (const PlannedTensor& placed : plan.resident) {
    const TensorEntry& tensor = tensors[placed.table_index];
    slab_hash.Update(tensor.name.data(), tensor.name.size() + 1);
    slab_hash.Update(&placed.offset, sizeof(placed.offset));
    slab_hash.Update(&tensor.byte_size, sizeof(tensor.byte_size));
  }
  plan.slab_signature = slab_hash.HexDigest();
}

// The units still streamed, each tensor at its offset in the unit; the signature names them.
void PlaceUnits(const std::vector<TensorEntry>& tensors, const UnitGroups& groups,
                const std::vector<bool>& streamed, SessionPlan& plan) {
  Xxh3Hasher hash;
  for (size_t u = 0; u < groups.name.size(); ++u) {
    StreamUnit unit;
    unit.name = groups.name[u];
    for (uint32_t i : groups.members[u]) {
      if (!streamed[i]) continue;
      unit.span_bytes = AlignUp(unit.span_bytes, kTensorAlignment);
      unit.tensors.push_back({i, unit.span_bytes});
      unit.span_bytes += tensors[i].byte_size;
      unit.tensor_bytes += tensors[i].byte_size;
      hash.Update(tensors[i].name.data(), tensors[i].name.size() + 1);
    }
    if (unit.tensors.empty()) continue;
    unit.span_bytes = AlignUp(unit.span_bytes, kTensorAlignment);
    plan.slot_bytes = std::max(plan.slot_bytes, unit.span_bytes);
    plan.streamed_bytes += unit.tensor_bytes;
    hash.Update("|", 1);
    plan.units.push_back(std::move(unit));
  }
  plan.signature = hash.HexDigest();
}

// The ring: an arena of `slots` largest units, with as many slots in flight as it holds of
// the smallest unit, so that packing is never limited by the slot count (within reason: each
// slot has a pair of events).
void SizeRing(uint32_t slots, SessionPlan& plan) {
  if (plan.units.empty()) return;
  uint64_t smallest_unit = plan.slot_bytes;
  for (const StreamUnit& unit : plan.units) smallest_unit = std::min(smallest_unit, unit.span_bytes);
  plan.arena_bytes = plan.slot_bytes * slots;
  plan.ring_slots = static_cast<uint32_t>(std::clamp<uint64_t>(
      plan.arena_bytes / std::max<uint64_t>(smallest_unit, 1), slots, kMaxSlotsInFlight));
}

}  // namespace

absl::StatusOr<SessionPlan> PlanSession(const std::vector<TensorEntry>& tensors,
                                        const std::set<std::string>& streamable,
                                        const StreamSettings& settings, const WeightRows& rows) {
  SessionPlan plan;
  DecisionLog decide(plan);
  DDO_RETURN_IF_ERROR(CheckStreamable(tensors, streamable));
  DDO_ASSIGN_OR_RETURN(StreamCandidates candidates,
                       FindStreamCandidates(tensors, streamable, settings, decide));
  const UnitGroups groups = GroupIntoUnits(candidates, settings.grouping);
  decide("stream_unit", settings.grouping == UnitGrouping::kBlock ? "block" : "linear",
         "DDO_STREAM_UNIT");
  DDO_ASSIGN_OR_RETURN(const ResidentBlocks blocks, FindResidentBlocks(candidates, settings, decide));

  uint64_t largest_unit = 0;
  for (const auto& members : groups.members) {
    largest_unit = std::max(largest_unit, UnitSpan(tensors, members));
  }
  uint64_t mandatory_resident = 0;
  for (uint32_t i = 0; i < tensors.size(); ++i) {
    if (!candidates.streamed[i]) mandatory_resident += AlignUp(tensors[i].byte_size, kTensorAlignment);
  }
  const uint32_t slots = FittingArenaSlots(settings, mandatory_resident, largest_unit, decide);
  DDO_ASSIGN_OR_RETURN(const uint64_t budget,
                       ResidentBudget(settings, mandatory_resident, slots, largest_unit, decide));
  const bool rows_known = RowsKnown(tensors, candidates, blocks, rows);
  ResidentSelection selection = settings.selection;
  if (selection == ResidentSelection::kAuto || selection == ResidentSelection::kCompute) {
    if (!rows_known) {
      decide("resident_selection", "spread",
             selection == ResidentSelection::kAuto
                 ? "DDO_RESIDENT_MODULE_SELECTION=auto: no forward of this component reported "
                   "what its Linears compute yet (the first session learns it)"
                 : "DDO_RESIDENT_MODULE_SELECTION=compute, but no forward of this component "
                   "reported what its Linears compute yet");
    }
    selection = rows_known ? ResidentSelection::kCompute : ResidentSelection::kSpread;
  }
  if (selection == ResidentSelection::kCompute) {
    SelectResidentWeights(tensors, blocks, rows, budget, candidates, decide);
  } else {
    const std::set<std::string> resident_blocks =
        SelectResidentBlocks(blocks, budget, selection, decide);
    for (size_t c = 0; c < candidates.index.size(); ++c) {
      if (resident_blocks.count(blocks.of_path.at(candidates.path[c]))) {
        candidates.streamed[candidates.index[c]] = false;
      }
    }
  }

  PlaceSlab(tensors, candidates.streamed, plan);
  PlaceUnits(tensors, groups, candidates.streamed, plan);
  SizeRing(slots, plan);
  decide("streamed", absl::StrCat(plan.units.size(), " units, ", FormatBytes(plan.streamed_bytes)),
         "weights neither small, always resident nor in a resident block");
  decide("ring",
         plan.units.empty()
             ? "none"
             : absl::StrCat(FormatBytes(plan.arena_bytes), " arena (", slots, " x the largest unit, ",
                            FormatBytes(plan.slot_bytes), "), up to ", plan.ring_slots,
                            " units in flight, + 1 out-of-schedule slot"),
         plan.units.empty() ? "nothing is streamed"
                            : "units pack into the arena back to back; the extra slot serves "
                              "out-of-schedule uses");
  decide("slab", FormatBytes(plan.slab_bytes), "every resident tensor, 256-byte aligned");
  return plan;
}

}  // namespace ddo
