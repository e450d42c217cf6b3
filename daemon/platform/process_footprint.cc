// The parsers of process_footprint.h, shared by both systems (tests run them everywhere).
#include "daemon/platform/process_footprint.h"

#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace ddo {

absl::StatusOr<uint64_t> ParseStatusRssAnon(absl::string_view status_text) {
  for (absl::string_view line : absl::StrSplit(status_text, '\n')) {
    if (!absl::ConsumePrefix(&line, "RssAnon:")) continue;
    line = absl::StripAsciiWhitespace(line);
    uint64_t kib = 0;
    if (!absl::ConsumeSuffix(&line, "kB") ||
        !absl::SimpleAtoi(absl::StripAsciiWhitespace(line), &kib)) {
      return absl::InvalidArgumentError("RssAnon is not a number of kB");
    }
    return kib * 1024;
  }
  return absl::NotFoundError("no RssAnon line (a kernel before 4.5)");
}

absl::StatusOr<uint64_t> ParseStatStartTime(absl::string_view stat_text) {
  // "pid (comm) state ppid ...": comm may hold spaces and parentheses, so the fields are
  // counted from after the last ')'. The start time is field 22, the 20th after it.
  const size_t comm_end = stat_text.rfind(')');
  if (comm_end == absl::string_view::npos) {
    return absl::InvalidArgumentError("no command name in the stat line");
  }
  const std::vector<absl::string_view> fields =
      absl::StrSplit(stat_text.substr(comm_end + 1), ' ', absl::SkipEmpty());
  uint64_t started = 0;
  if (fields.size() < 20 || !absl::SimpleAtoi(fields[19], &started)) {
    return absl::InvalidArgumentError("the stat line has no start time");
  }
  return started;
}

}  // namespace ddo
