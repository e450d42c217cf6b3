// File: daemon/policy/module_blocks.cc
#include "daemon/policy/module_blocks.h"

#include <algorithm>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "daemon/common/status_macros.h"
#include "daemon/config/module_patterns.h"

namespace ddo {
namespace {

bool IsDigits(absl::string_view text) {
  return !text.empty() && std::all_of(text.begin(), text.end(), [](char c) {
    return absl::ascii_isdigit(static_cast<unsigned char>(c));
  });
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

}  // namespace ddo
