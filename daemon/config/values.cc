#include "daemon/config/values.h"

#include <cmath>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "ddo/wire/display_text.h"

namespace ddo {

bool ParseSeedBool(absl::string_view text) {
  const std::string lowered = absl::AsciiStrToLower(absl::StripAsciiWhitespace(text));
  return lowered == "1" || lowered == "true" || lowered == "yes" || lowered == "on";
}

absl::StatusOr<double> ParseNonNegativeNumber(absl::string_view what, absl::string_view text) {
  double value = 0;
  if (!absl::SimpleAtod(absl::StripAsciiWhitespace(text), &value) || !std::isfinite(value) ||
      value < 0 || value > kMaxGiB) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid value '", EscapeForDisplay(text), "' for ", what,
                     ": expected a number of GiB from 0 to ", FormatNumber(kMaxGiB)));
  }
  return value;
}

absl::StatusOr<double> ParseNumberInRange(absl::string_view what, absl::string_view text,
                                          double min, double max) {
  double value = 0;
  // !(a <= b) also catches NaN.
  if (!absl::SimpleAtod(absl::StripAsciiWhitespace(text), &value) || !std::isfinite(value) ||
      !(value >= min && value <= max)) {
    return absl::InvalidArgumentError(absl::StrCat(what, "='", EscapeForDisplay(text),
                                                   "' is not a finite number from ",
                                                   FormatNumber(min), " to ", FormatNumber(max)));
  }
  return value;
}

absl::StatusOr<int64_t> ParsePid(absl::string_view what, absl::string_view text) {
  int64_t pid = 0;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(text), &pid) || pid <= 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid value '", EscapeForDisplay(text), "' for ", what,
                     ": expected a process id > 1"));
  }
  return pid;
}

std::string FormatNumber(double value) {
  if (std::isfinite(value) && value == std::trunc(value) && std::fabs(value) < 1e15) {
    return absl::StrCat(static_cast<int64_t>(value));
  }
  return absl::StrCat(value);
}

uint64_t GiBToBytes(double gib) {
  if (!(gib > 0)) return 0;  // also NaN
  if (gib > kMaxGiB) gib = kMaxGiB;
  return static_cast<uint64_t>(std::llround(gib * kBytesPerGiB));
}

}  // namespace ddo
