// File: daemon/config/module_patterns.h
//
// The module-path patterns of DDO_ALWAYS_RESIDENT_MODULE_PATTERNS and
// DDO_RESIDENT_MODULE_PATTERNS: client-supplied regular expressions, checked and matched with
// RE2, whose matching time is linear in the path's length whatever the pattern (std::regex
// backtracked: `(x+x+)+y` ran for minutes and a long path overflowed the stack). Every pattern
// is bounded in size, every setting in its number of patterns, and each compiled pattern in
// memory. Semantics are Python's re.search (the seed's): a pattern matches when it matches
// anywhere in the path; RE2 syntax (no backreferences or lookaround).
//
// Thread-safety: the functions are pure; a ModulePatterns is immutable after Compile and may be
// searched from several threads at once (RE2 is thread-safe for matching).
#ifndef DDO_DAEMON_CONFIG_MODULE_PATTERNS_H_
#define DDO_DAEMON_CONFIG_MODULE_PATTERNS_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace re2 {
class RE2;
}  // namespace re2

namespace ddo {

// The longest pattern a setting may hold, in bytes.
inline constexpr size_t kMaxModulePatternBytes = 512;
// The most patterns one setting may list.
inline constexpr size_t kMaxModulePatternsPerSetting = 64;
// RE2's max_mem for each compiled pattern: the program and its DFA cache (RE2 falls back to
// its linear NFA when the DFA cache is full, so this bounds memory, never correctness).
inline constexpr int64_t kModulePatternMaxMemBytes = int64_t{1} << 20;
// The longest module path (or tensor name) ddod matches patterns against; longer names are
// refused where they enter (request_limits.h, PlanSession) rather than matched.
inline constexpr size_t kMaxModulePathBytes = 1024;

// InvalidArgument when `count` patterns exceed kMaxModulePatternsPerSetting; names `setting`.
absl::Status CheckModulePatternCount(absl::string_view setting, size_t count);

// InvalidArgument when `pattern`, the `index`-th (from 0) of `setting`, is longer than
// kMaxModulePatternBytes or is not a regular expression RE2 compiles within
// kModulePatternMaxMemBytes. The message names the setting and the index and shows at most
// the first 64 bytes of the pattern, escaped.
absl::Status CheckModulePattern(absl::string_view setting, size_t index, absl::string_view pattern);

// A setting's patterns, compiled.
class ModulePatterns {
 public:
  ModulePatterns();  // no patterns: matches nothing
  ~ModulePatterns();
  ModulePatterns(ModulePatterns&&) noexcept;
  ModulePatterns& operator=(ModulePatterns&&) noexcept;
  ModulePatterns(const ModulePatterns&) = delete;
  ModulePatterns& operator=(const ModulePatterns&) = delete;

  // Checks (CheckModulePatternCount, CheckModulePattern) and compiles every pattern.
  static absl::StatusOr<ModulePatterns> Compile(absl::string_view setting,
                                                const std::vector<std::string>& patterns);

  // True when some pattern matches somewhere in `path` (re.search). Linear in path.size().
  bool Search(absl::string_view path) const;

  size_t size() const { return compiled_.size(); }

 private:
  std::vector<std::unique_ptr<const re2::RE2>> compiled_;
};

}  // namespace ddo

#endif  // DDO_DAEMON_CONFIG_MODULE_PATTERNS_H_
