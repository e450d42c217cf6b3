// File: daemon/stream/session_plan.cc
#include "daemon/stream/session_plan.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "daemon/common/display_text.h"
#include "daemon/common/format_bytes.h"
#include "daemon/common/status_macros.h"
#include "daemon/common/xxh3_hasher.h"
#include "daemon/config/module_patterns.h"
#include "daemon/config/setting_catalog.h"
#include "daemon/config/values.h"

namespace ddo {
namespace {

// DDO_RING_SLOTS: the arena's size in largest units.
constexpr uint32_t kMaxRingSlots = 64;
// Units in flight at most (each slot has a use, an offset and two interprocess events).
constexpr uint64_t kMaxSlotsInFlight = 128;

// "a.b.weight" -> "a.b"; "weight" (the component is the Linear) -> "".
std::string ModulePathOfWeight(const std::string& name) {
  return name == "weight" ? std::string() : name.substr(0, name.size() - 7);
}

uint64_t AlignUp(uint64_t value, uint64_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
}

absl::StatusOr<uint64_t> GiBSetting(const std::string& name, const std::string& text) {
  absl::StatusOr<double> gib = ParseNonNegativeNumber(name, text);
  if (!gib.ok()) return gib.status();
  return GiBToBytes(*gib);
}

bool IsDigits(absl::string_view text) {
  return !text.empty() && std::all_of(text.begin(), text.end(), [](char c) {
    return absl::ascii_isdigit(static_cast<unsigned char>(c));
  });
}


// The seed's candidate order (research/seed-ddo.md §4.3 step 6).
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

}  // namespace

namespace {

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

// "transformer_blocks.3" for `block_prefix` "transformer_blocks": the seed's inferred
// pattern ^<prefix>\.\d+$, matched without a regex (the prefix may be long).
bool IsIndexedMemberOf(absl::string_view path, absl::string_view block_prefix) {
  return path.size() > block_prefix.size() + 1 && absl::StartsWith(path, block_prefix) &&
         path[block_prefix.size()] == '.' && IsDigits(path.substr(block_prefix.size() + 1));
}

std::string RegexEscape(absl::string_view text) {
  std::string out;
  for (char c : text) {
    if (absl::StrContains("\\^$.|?*+()[]{}", c)) out.push_back('\\');
    out.push_back(c);
  }
  return out;
}

}  // namespace

absl::StatusOr<std::map<std::string, std::string>> ResidentCandidatesOf(
    const std::vector<std::string>& module_paths, const std::vector<uint64_t>& bytes,
    const std::vector<std::string>& patterns, std::string* described) {
  if (patterns.empty()) {
    *described = "every repeated block";
    return BlocksOf(module_paths);
  }
  std::vector<std::string> regexes;        // the client's patterns
  std::vector<std::string> inferred;       // block prefixes that "auto" inferred
  std::vector<std::string> descriptions;   // both, as patterns, in the order given
  for (const std::string& pattern : patterns) {
    if (pattern != "auto") {
      regexes.push_back(pattern);
      descriptions.push_back(pattern);
      continue;
    }
    // The seed's inference: groups "<prefix>.<digits>" with at least two members; the one with
    // the most bytes (then the most members) gives the pattern.
    std::map<std::string, std::set<std::string>> members;
    std::map<std::string, uint64_t> group_bytes;
    for (size_t p = 0; p < module_paths.size(); ++p) {
      if (module_paths[p].size() > kMaxModulePathBytes) continue;
      std::vector<std::string> parts = absl::StrSplit(module_paths[p], '.');
      for (size_t i = 1; i < parts.size(); ++i) {
        if (!IsDigits(parts[i])) continue;
        const std::string prefix = absl::StrJoin(parts.begin(), parts.begin() + i, ".");
        members[prefix].insert(parts[i]);
        group_bytes[prefix] += bytes[p];
      }
    }
    std::string best;
    for (const auto& [prefix, indices] : members) {
      if (indices.size() < 2) continue;
      if (best.empty() || group_bytes[prefix] > group_bytes[best] ||
          (group_bytes[prefix] == group_bytes[best] && indices.size() > members[best].size())) {
        best = prefix;
      }
    }
    if (!best.empty()) {
      descriptions.push_back(absl::StrCat("^", RegexEscape(best), "\\.\\d+$"));
      inferred.push_back(best);
    }
  }
  *described = descriptions.empty() ? "none (no repeated block to infer)"
                                    : absl::StrJoin(descriptions, ",");
  DDO_ASSIGN_OR_RETURN(const ModulePatterns compiled,
                       ModulePatterns::Compile("DDO_RESIDENT_MODULE_PATTERNS", regexes));
  std::map<std::string, std::string> candidate_of;
  for (const std::string& path : module_paths) {
    std::string candidate;
    // Longer paths are refused where they enter (PlanSession); never matched prefix by prefix.
    if (path.size() <= kMaxModulePathBytes) {
      std::vector<std::string> parts = absl::StrSplit(path, '.');
      std::string prefix;
      for (size_t i = 0; i < parts.size() && candidate.empty(); ++i) {
        if (i > 0) prefix += '.';
        prefix += parts[i];
        bool matched = compiled.Search(prefix);
        for (const std::string& block : inferred) {
          matched = matched || IsIndexedMemberOf(prefix, block);
        }
        if (matched) candidate = prefix;
      }
    }
    candidate_of[path] = candidate;
  }
  return candidate_of;
}

std::map<std::string, std::string> BlocksOf(const std::vector<std::string>& module_paths) {
  std::map<std::string, std::set<std::string>> members;  // prefix -> block paths
  for (const std::string& path : module_paths) {
    std::vector<std::string> parts = absl::StrSplit(path, '.');
    for (size_t i = 1; i < parts.size(); ++i) {
      if (!IsDigits(parts[i])) continue;
      const std::string prefix = absl::StrJoin(parts.begin(), parts.begin() + i, ".");
      members[prefix].insert(absl::StrCat(prefix, ".", parts[i]));
    }
  }
  std::map<std::string, std::string> block_of;
  for (const std::string& path : module_paths) {
    std::vector<std::string> parts = absl::StrSplit(path, '.');
    std::string block;
    for (size_t i = 1; i < parts.size() && block.empty(); ++i) {
      if (!IsDigits(parts[i])) continue;
      const std::string prefix = absl::StrJoin(parts.begin(), parts.begin() + i, ".");
      if (members[prefix].size() >= 2) block = absl::StrCat(prefix, ".", parts[i]);
    }
    block_of[path] = block;
  }
  return block_of;
}

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
      if (lower == "spread") {
        settings.selection = ResidentSelection::kSpread;
      } else if (lower == "first") {
        settings.selection = ResidentSelection::kFirst;
      } else if (lower == "largest") {
        settings.selection = ResidentSelection::kLargest;
      } else {
        return absl::InvalidArgumentError(
            absl::StrCat("DDO_RESIDENT_MODULE_SELECTION='", EscapeForDisplay(text),
                         "' must be 'spread', 'first' or 'largest'"));
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

absl::StatusOr<SessionPlan> PlanSession(const std::vector<TensorEntry>& tensors,
                                        const std::set<std::string>& streamable,
                                        const StreamSettings& settings) {
  SessionPlan plan;
  auto decide = [&plan](std::string key, std::string value, std::string reason) {
    plan.decisions.push_back({std::move(key), std::move(value), std::move(reason)});
  };

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

  DDO_ASSIGN_OR_RETURN(const ModulePatterns always_resident,
                       ModulePatterns::Compile("DDO_ALWAYS_RESIDENT_MODULE_PATTERNS",
                                               settings.always_resident_patterns));

  // Which streamable weights stay resident anyway.
  std::vector<uint32_t> candidates;  // table order
  uint64_t small_count = 0, small_bytes = 0, pinned_count = 0, pinned_bytes = 0;
  std::vector<bool> streamed(tensors.size(), false);
  for (uint32_t i = 0; i < tensors.size(); ++i) {
    const TensorEntry& tensor = tensors[i];
    if (streamable.count(tensor.name) == 0) continue;
    const std::string module_path = ModulePathOfWeight(tensor.name);
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
    candidates.push_back(i);
    streamed[i] = true;
  }
  decide("streamable_weights", absl::StrCat(streamable.size()),
         "dense Linear weights the runner can stream");
  decide("resident_small", absl::StrCat(small_count, " (", FormatBytes(small_bytes), ")"),
         absl::StrCat("at most DDO_SMALL_TENSOR_THRESHOLD_KB=", settings.small_tensor_bytes / 1024));
  decide("resident_always", absl::StrCat(pinned_count, " (", FormatBytes(pinned_bytes), ")"),
         absl::StrCat("modules matching DDO_ALWAYS_RESIDENT_MODULE_PATTERNS=",
                      absl::StrJoin(settings.always_resident_patterns, ",")));

  // Units.
  std::vector<std::string> paths;
  for (uint32_t i : candidates) paths.push_back(ModulePathOfWeight(tensors[i].name));
  const std::map<std::string, std::string> block_of = BlocksOf(paths);
  std::vector<std::string> unit_names;
  std::vector<std::vector<uint32_t>> unit_members;
  std::map<std::string, size_t> unit_index;
  std::vector<std::string> unit_block;  // "" when not in a block
  for (size_t c = 0; c < candidates.size(); ++c) {
    const std::string& block = block_of.at(paths[c]);
    std::string name = paths[c];
    if (settings.grouping == UnitGrouping::kBlock && !block.empty()) name = block;
    auto [it, inserted] = unit_index.emplace(name, unit_names.size());
    if (inserted) {
      unit_names.push_back(name);
      unit_members.emplace_back();
      unit_block.push_back(block);
    }
    unit_members[it->second].push_back(candidates[c]);
  }
  decide("stream_unit", settings.grouping == UnitGrouping::kBlock ? "block" : "linear",
         "DDO_STREAM_UNIT");

  // The modules the resident budget may keep whole, and their streamed bytes, in order of
  // appearance.
  std::vector<uint64_t> path_bytes;
  for (uint32_t i : candidates) path_bytes.push_back(tensors[i].byte_size);
  std::string patterns_in_use;
  using CandidateMap = std::map<std::string, std::string>;
  DDO_ASSIGN_OR_RETURN(const CandidateMap resident_of,
                       ResidentCandidatesOf(paths, path_bytes, settings.resident_module_patterns,
                                            &patterns_in_use));
  decide("resident_module_patterns", patterns_in_use,
         settings.resident_module_patterns.empty()
             ? "DDO_RESIDENT_MODULE_PATTERNS not sent: every repeated block is a candidate"
             : absl::StrCat("DDO_RESIDENT_MODULE_PATTERNS=",
                            absl::StrJoin(settings.resident_module_patterns, ",")));
  std::vector<std::string> blocks;
  std::map<std::string, uint64_t> block_bytes;
  for (size_t c = 0; c < candidates.size(); ++c) {
    const std::string& block = resident_of.at(paths[c]);
    if (block.empty()) continue;
    if (block_bytes.count(block) == 0) blocks.push_back(block);
    block_bytes[block] += tensors[candidates[c]].byte_size;
  }

  auto unit_span = [&](const std::vector<uint32_t>& members) {
    uint64_t span = 0;
    for (uint32_t i : members) span = AlignUp(span, kTensorAlignment) + tensors[i].byte_size;
    return AlignUp(span, kTensorAlignment);
  };
  uint64_t largest_unit = 0;
  for (const auto& members : unit_members) largest_unit = std::max(largest_unit, unit_span(members));
  uint32_t slots = settings.ring_slots;
  // Linear units are small: more slots keep the copy engine busy across resident stretches.
  if (slots == 0) slots = settings.grouping == UnitGrouping::kBlock ? 3 : 8;
  uint64_t mandatory_resident = 0;
  for (uint32_t i = 0; i < tensors.size(); ++i) {
    if (!streamed[i]) mandatory_resident += AlignUp(tensors[i].byte_size, kTensorAlignment);
  }
  const uint64_t ring_estimate = largest_unit * (slots + 1ull);  // the arena + the extra slot

  // The resident budget.
  uint64_t budget = 0;
  std::string budget_reason;
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
    budget_reason = absl::StrCat("DDO_VRAM_BUDGET_GB ", FormatBytes(*settings.vram_budget_bytes),
                                 " - resident tensors ", FormatBytes(mandatory_resident),
                                 " - ring ", FormatBytes(ring_estimate), " - activation reserve ",
                                 FormatBytes(settings.activation_reserve_bytes),
                                 settings.resident_budget_bytes ? ", capped by DDO_RESIDENT_MODULE_BUDGET_GB" : "");
  } else if (settings.resident_budget_bytes) {
    budget = *settings.resident_budget_bytes;
    budget_reason = "DDO_RESIDENT_MODULE_BUDGET_GB";
  } else {
    budget_reason = "no DDO_VRAM_BUDGET_GB and no DDO_RESIDENT_MODULE_BUDGET_GB";
  }
  decide("resident_budget", FormatBytes(budget), budget_reason);

  // Whole blocks made resident, greedily in selection order.
  std::set<std::string> resident_blocks;
  {
    std::vector<uint64_t> sizes;
    for (const std::string& block : blocks) sizes.push_back(block_bytes[block]);
    uint64_t used = 0;
    if (budget > 0) {
      for (size_t index : SelectionOrder(sizes, budget, settings.selection)) {
        if (used + sizes[index] > budget) continue;
        used += sizes[index];
        resident_blocks.insert(blocks[index]);
      }
    }
    std::vector<std::string> chosen;
    for (const std::string& block : blocks) {
      if (resident_blocks.count(block)) chosen.push_back(block);
    }
    decide("selected_resident_module_gb", absl::StrFormat("%.4f", used / (1024.0 * 1024 * 1024)),
           "the seed's name for the bytes of the modules kept whole");
    decide("resident_blocks",
           absl::StrCat(chosen.size(), " of ", blocks.size(), " (", FormatBytes(used), ")",
                        chosen.empty() ? "" : ": ", absl::StrJoin(chosen, ", ")),
           settings.selection == ResidentSelection::kSpread    ? "spread evenly (seed rule)"
           : settings.selection == ResidentSelection::kFirst ? "first blocks first"
                                                              : "largest blocks first");
  }
  for (size_t c = 0; c < candidates.size(); ++c) {
    if (resident_blocks.count(resident_of.at(paths[c]))) streamed[candidates[c]] = false;
  }

  // The slab: every tensor not streamed, in table order.
  for (uint32_t i = 0; i < tensors.size(); ++i) {
    if (streamed[i]) continue;
    plan.slab_bytes = AlignUp(plan.slab_bytes, kTensorAlignment);
    plan.resident.push_back({i, plan.slab_bytes});
    plan.slab_bytes += tensors[i].byte_size;
    plan.resident_bytes += tensors[i].byte_size;
  }
  plan.slab_bytes = AlignUp(plan.slab_bytes, kTensorAlignment);
  {
    Xxh3Hasher slab_hash;
    for (const PlannedTensor& placed : plan.resident) {
      const TensorEntry& tensor = tensors[placed.table_index];
      slab_hash.Update(tensor.name.data(), tensor.name.size() + 1);
      slab_hash.Update(&placed.offset, sizeof(placed.offset));
      slab_hash.Update(&tensor.byte_size, sizeof(tensor.byte_size));
    }
    plan.slab_signature = slab_hash.HexDigest();
  }

  // The units still streamed.
  Xxh3Hasher hash;
  for (size_t u = 0; u < unit_names.size(); ++u) {
    StreamUnit unit;
    unit.name = unit_names[u];
    for (uint32_t i : unit_members[u]) {
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
  if (!plan.units.empty()) {
    uint64_t smallest_unit = plan.slot_bytes;
    for (const StreamUnit& unit : plan.units) smallest_unit = std::min(smallest_unit, unit.span_bytes);
    plan.arena_bytes = plan.slot_bytes * slots;
    // As many slots as the arena can hold of the smallest unit, so that packing is never
    // limited by the slot count (within reason: each slot has a pair of events).
    plan.ring_slots = static_cast<uint32_t>(std::clamp<uint64_t>(
        plan.arena_bytes / std::max<uint64_t>(smallest_unit, 1), slots, kMaxSlotsInFlight));
  }
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
