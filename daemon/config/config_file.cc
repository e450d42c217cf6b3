// The configuration file's syntax, shared by both systems; config_file_posix.cc and
// config_file_windows.cc read the file.
#include "daemon/config/config_file.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "ddo/wire/display_text.h"

namespace ddo {
namespace {

bool IsNameCharacter(char c) { return absl::ascii_isalnum(c) || c == '_'; }

absl::Status LineError(absl::string_view path, size_t line, absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat(EscapeForDisplay(path), ":", line, ": ", what));
}

}  // namespace

absl::StatusOr<Environment> ParseConfigText(absl::string_view path, absl::string_view text,
                                            const std::function<bool(absl::string_view)>& known) {
  Environment values;
  size_t number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++number;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line.front() == '#' || line.front() == ';') continue;
    const size_t equals = line.find('=');
    if (equals == absl::string_view::npos) {
      return LineError(path, number, absl::StrCat("'", EscapeForDisplay(line),
                                                  "' is not NAME=VALUE"));
    }
    const absl::string_view name = absl::StripAsciiWhitespace(line.substr(0, equals));
    absl::string_view value = absl::StripAsciiWhitespace(line.substr(equals + 1));
    if (name.empty() || !std::all_of(name.begin(), name.end(), IsNameCharacter)) {
      return LineError(path, number, absl::StrCat("'", EscapeForDisplay(name),
                                                  "' is not a variable name"));
    }
    if (!known(name)) {
      return LineError(path, number,
                       absl::StrCat(EscapeForDisplay(name),
                                    " is not a variable ddod reads (see ddod --help and "
                                    "docs/configuration.md)"));
    }
    if (value.size() >= 2 && (value.front() == '"' || value.front() == '\'') &&
        value.back() == value.front()) {
      value = value.substr(1, value.size() - 2);
    }
    if (std::any_of(value.begin(), value.end(),
                    [](char c) { return static_cast<unsigned char>(c) < 0x20 && c != '\t'; })) {
      return LineError(path, number, absl::StrCat(name, " has a control character in its value"));
    }
    values[std::string(name)] = std::string(value);
  }
  return values;
}

}  // namespace ddo
