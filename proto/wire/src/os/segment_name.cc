// The segment-name rule both implementations share (ddo/os/shared_memory.h).
#include "absl/strings/str_cat.h"
#include "segment_name.h"

#include "ddo/os/shared_memory.h"

namespace ddo::os {
namespace {

constexpr size_t kMaxNameLength = 200;

bool NameCharacter(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         c == '.' || c == '_' || c == '-';
}

}  // namespace

absl::Status CheckSegmentName(const std::string& name) {
  if (name.empty() || name.size() > kMaxNameLength) {
    return absl::InvalidArgumentError(absl::StrCat("a segment name has 1 to ", kMaxNameLength,
                                                   " characters, not ", name.size()));
  }
  for (char c : name) {
    if (!NameCharacter(c)) {
      return absl::InvalidArgumentError(
          "a segment name has only letters, digits, '.', '_' and '-'");
    }
  }
  if (name == "." || name == "..") {
    return absl::InvalidArgumentError("a segment name is not '.' or '..'");
  }
  return absl::OkStatus();
}

}  // namespace ddo::os

namespace ddo::os {

absl::Status CheckNewSegment(const std::string& name, uint64_t bytes) {
  if (absl::Status valid = CheckSegmentName(name); !valid.ok()) return valid;
  if (bytes == 0) return absl::InvalidArgumentError("a segment has at least one byte");
  return absl::OkStatus();
}

}  // namespace ddo::os
