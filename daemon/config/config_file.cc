#include "daemon/config/config_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "ddo/wire/display_text.h"
#include "ddo/wire/posix_error.h"
#include "ddo/wire/unique_fd.h"

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

absl::StatusOr<Environment> ReadConfigFile(const std::string& path,
                                           const std::function<bool(absl::string_view)>& known) {
  // O_NONBLOCK: a FIFO put in the file's place must not block ddod's start or its reload.
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK));
  if (!fd.valid()) {
    const int error = errno;
    return PosixError(absl::StrCat("cannot open the configuration file ",
                                   EscapeForDisplay(path)),
                      error);
  }
  struct stat info {};
  if (::fstat(fd.get(), &info) != 0) {
    return PosixError(absl::StrCat("cannot stat ", EscapeForDisplay(path)), errno);
  }
  if (!S_ISREG(info.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat("the configuration file ", EscapeForDisplay(path), " is not a regular file"));
  }
  if (static_cast<size_t>(info.st_size) > kMaxConfigFileBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("the configuration file ", EscapeForDisplay(path), " has ", info.st_size,
                     " bytes, at most ", kMaxConfigFileBytes, " allowed"));
  }
  std::string text(kMaxConfigFileBytes + 1, '\0');
  size_t filled = 0;
  for (;;) {
    const ssize_t got = ::read(fd.get(), text.data() + filled, text.size() - filled);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return PosixError(absl::StrCat("cannot read ", EscapeForDisplay(path)), errno);
    if (got == 0) break;
    filled += static_cast<size_t>(got);
    if (filled > kMaxConfigFileBytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the configuration file ", EscapeForDisplay(path), " grew past ", kMaxConfigFileBytes,
          " bytes while it was read"));
    }
  }
  text.resize(filled);
  return ParseConfigText(path, text, known);
}

}  // namespace ddo
