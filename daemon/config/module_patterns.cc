// File: daemon/config/module_patterns.cc
#include "daemon/config/module_patterns.h"

#include <re2/re2.h>

#include "absl/strings/str_cat.h"
#include "ddo/wire/display_text.h"

namespace ddo {
namespace {

// Bytes of a pattern that an error message shows.
constexpr size_t kShownPatternBytes = 64;
// Bytes of RE2's error argument (the offending piece of the pattern) shown.
constexpr size_t kShownErrorArgumentBytes = 32;

re2::RE2::Options PatternOptions() {
  re2::RE2::Options options;
  options.set_max_mem(kModulePatternMaxMemBytes);
  options.set_log_errors(false);  // errors are returned to the caller, never logged by RE2
  return options;
}

std::unique_ptr<const re2::RE2> CompilePattern(absl::string_view pattern) {
  return std::make_unique<const re2::RE2>(re2::StringPiece(pattern.data(), pattern.size()),
                                          PatternOptions());
}

// "DDO_X[2]='(open'"
std::string Named(absl::string_view setting, size_t index, absl::string_view pattern) {
  return absl::StrCat(setting, "[", index, "]='", EscapeForDisplay(pattern, kShownPatternBytes),
                      "'");
}

absl::Status CompileError(absl::string_view setting, size_t index, absl::string_view pattern,
                          const re2::RE2& compiled) {
  // RE2's error() is "<what>: <argument>" where the argument may be the whole pattern; show
  // the description and a short escaped argument only.
  const std::string& error = compiled.error();
  const absl::string_view what = absl::string_view(error).substr(0, error.find(": "));
  std::string detail(what);
  if (!compiled.error_arg().empty()) {
    absl::StrAppend(&detail, " at '",
                    EscapeForDisplay(compiled.error_arg(), kShownErrorArgumentBytes), "'");
  }
  return absl::InvalidArgumentError(
      absl::StrCat(Named(setting, index, pattern),
                   " is not a regular expression (RE2 syntax, at most ",
                   kModulePatternMaxMemBytes >> 10, " KiB compiled): ", detail));
}

}  // namespace

absl::Status CheckModulePatternCount(absl::string_view setting, size_t count) {
  if (count > kMaxModulePatternsPerSetting) {
    return absl::InvalidArgumentError(absl::StrCat(setting, ": ", count, " patterns, at most ",
                                                   kMaxModulePatternsPerSetting, " allowed"));
  }
  return absl::OkStatus();
}

absl::Status CheckModulePattern(absl::string_view setting, size_t index,
                                absl::string_view pattern) {
  if (pattern.size() > kMaxModulePatternBytes) {
    return absl::InvalidArgumentError(absl::StrCat(Named(setting, index, pattern), " is ",
                                                   pattern.size(), " bytes long, at most ",
                                                   kMaxModulePatternBytes, " allowed"));
  }
  const std::unique_ptr<const re2::RE2> compiled = CompilePattern(pattern);
  if (!compiled->ok()) return CompileError(setting, index, pattern, *compiled);
  return absl::OkStatus();
}

ModulePatterns::ModulePatterns() = default;
ModulePatterns::~ModulePatterns() = default;
ModulePatterns::ModulePatterns(ModulePatterns&&) noexcept = default;
ModulePatterns& ModulePatterns::operator=(ModulePatterns&&) noexcept = default;

absl::StatusOr<ModulePatterns> ModulePatterns::Compile(absl::string_view setting,
                                                       const std::vector<std::string>& patterns) {
  if (absl::Status count = CheckModulePatternCount(setting, patterns.size()); !count.ok()) {
    return count;
  }
  ModulePatterns compiled;
  for (size_t i = 0; i < patterns.size(); ++i) {
    if (patterns[i].size() > kMaxModulePatternBytes) {
      return CheckModulePattern(setting, i, patterns[i]);
    }
    std::unique_ptr<const re2::RE2> one = CompilePattern(patterns[i]);
    if (!one->ok()) return CompileError(setting, i, patterns[i], *one);
    compiled.compiled_.push_back(std::move(one));
  }
  return compiled;
}

bool ModulePatterns::Search(absl::string_view path) const {
  const re2::StringPiece text(path.data(), path.size());
  for (const auto& pattern : compiled_) {
    if (re2::RE2::PartialMatch(text, *pattern)) return true;
  }
  return false;
}

}  // namespace ddo
