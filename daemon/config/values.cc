#include "daemon/config/values.h"

#include <cmath>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace ddo {

bool ParseSeedBool(absl::string_view text) {
  const std::string lowered = absl::AsciiStrToLower(absl::StripAsciiWhitespace(text));
  return lowered == "1" || lowered == "true" || lowered == "yes" || lowered == "on";
}

absl::StatusOr<double> ParseNonNegativeNumber(absl::string_view what, absl::string_view text) {
  double value = 0;
  if (!absl::SimpleAtod(absl::StripAsciiWhitespace(text), &value) || !std::isfinite(value) ||
      value < 0) {
    return absl::InvalidArgumentError(absl::StrCat("invalid value '", text, "' for ", what,
                                                   ": expected a number >= 0 (GiB)"));
  }
  return value;
}

absl::StatusOr<int64_t> ParsePid(absl::string_view what, absl::string_view text) {
  int64_t pid = 0;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(text), &pid) || pid <= 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid value '", text, "' for ", what, ": expected a process id > 1"));
  }
  return pid;
}

uint64_t GiBToBytes(double gib) { return static_cast<uint64_t>(std::llround(gib * kBytesPerGiB)); }

}  // namespace ddo
