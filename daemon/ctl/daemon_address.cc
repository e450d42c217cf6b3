#include "daemon/ctl/daemon_address.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "daemon/config/paths.h"

namespace ddo {
namespace {

constexpr char kAcceptedForms[] =
    "accepted: auto, embedded, unix:/abs/path, /abs/path, host:port";

absl::Status Invalid(const std::string& value, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("invalid DDO_DAEMON '", value, "': ", why, " (", kAcceptedForms, ")"));
}

bool ValidPort(absl::string_view text) {
  int port = 0;
  return absl::SimpleAtoi(text, &port) && port > 0 && port < 65536;
}

}  // namespace

std::string UnixSocketPath(const std::string& target) {
  if (absl::StartsWith(target, "unix:")) {
    return target.substr(5);
  }
  return "";
}

absl::StatusOr<DaemonTargets> ResolveDaemonTargets(const std::optional<std::string>& value,
                                                   const UserContext& user) {
  DaemonTargets result;
  const std::string text =
      value.has_value() ? std::string(absl::StripAsciiWhitespace(*value)) : std::string();
  if (text.empty() || absl::AsciiStrToLower(text) == "auto") {
    for (const std::string& path : DefaultSocketCandidates(user)) {
      result.targets.push_back(absl::StrCat("unix:", path));
    }
    return result;
  }
  result.fixed = true;
  if (absl::AsciiStrToLower(text) == "embedded") {
    result.embedded = true;
    return result;
  }
  std::string path;
  if (absl::StartsWith(text, "unix://")) {
    path = text.substr(7);
  } else if (absl::StartsWith(text, "unix:")) {
    path = text.substr(5);
  } else if (absl::StartsWith(text, "/")) {
    path = text;
  }
  if (!path.empty() || absl::StartsWith(text, "unix:")) {
    if (!absl::StartsWith(path, "/")) {
      return Invalid(text, "a Unix socket path must be absolute");
    }
    result.targets.push_back(absl::StrCat("unix:", path));
    return result;
  }
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0 || !ValidPort(text.substr(colon + 1))) {
    return Invalid(text, "expected a socket path or host:port");
  }
  result.targets.push_back(text);
  return result;
}

}  // namespace ddo
