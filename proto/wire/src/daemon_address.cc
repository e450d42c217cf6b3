#include "ddo/wire/daemon_address.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <unistd.h>

#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace ddo {
namespace {

constexpr char kAcceptedForms[] =
    "accepted: auto, embedded, unix:/abs/path, /abs/path, host:port, [ipv6]:port";

absl::Status Invalid(const std::string& value, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("invalid DDO_DAEMON '", value, "': ", why, " (", kAcceptedForms, ")"));
}

bool ValidPort(absl::string_view text) {
  int port = 0;
  return !text.empty() && absl::ascii_isdigit(static_cast<unsigned char>(text[0])) &&
         absl::SimpleAtoi(text, &port) && port > 0 && port < 65536;
}

// A host name or IPv4 address as the Python client accepts it: letters, digits, '.' and '-',
// starting and ending with a letter or digit.
bool ValidHost(absl::string_view host) {
  if (host.empty() || !absl::ascii_isalnum(static_cast<unsigned char>(host.front())) ||
      !absl::ascii_isalnum(static_cast<unsigned char>(host.back()))) {
    return false;
  }
  for (unsigned char c : host) {
    if (!absl::ascii_isalnum(c) && c != '.' && c != '-') return false;
  }
  return true;
}

bool ValidIpv6(const std::string& host) {
  in6_addr parsed{};
  return ::inet_pton(AF_INET6, host.c_str(), &parsed) == 1;
}

}  // namespace

SocketUser SocketUser::FromProcess() {
  SocketUser user;
  user.uid = ::geteuid();
  const char* runtime_dir = std::getenv("XDG_RUNTIME_DIR");
  if (runtime_dir != nullptr) user.xdg_runtime_dir = runtime_dir;
  return user;
}

std::string PerUserDirectory(uid_t uid) { return absl::StrCat("/tmp/ddo-", uid); }

std::string DefaultSocketPath(const SocketUser& user) {
  if (user.uid == 0) return kSystemSocketPath;
  if (!user.xdg_runtime_dir.empty()) {
    return absl::StrCat(user.xdg_runtime_dir, "/ddo/ddod.sock");
  }
  return absl::StrCat(PerUserDirectory(user.uid), "/ddod.sock");
}

std::vector<std::string> DefaultSocketCandidates(const SocketUser& user) {
  std::vector<std::string> candidates = {DefaultSocketPath(user)};
  if (candidates.front() != kSystemSocketPath) candidates.emplace_back(kSystemSocketPath);
  return candidates;
}

std::string UnixSocketPath(const std::string& target) {
  return absl::StartsWith(target, "unix:") ? target.substr(5) : std::string();
}

int TcpPort(const std::string& target) {
  if (absl::StartsWith(target, "unix:")) return 0;
  const size_t colon = target.rfind(':');
  int port = 0;
  if (colon == std::string::npos || !absl::SimpleAtoi(target.substr(colon + 1), &port)) return 0;
  return port;
}

absl::StatusOr<DaemonTargets> ResolveDaemonTargets(const std::optional<std::string>& value,
                                                   const SocketUser& user) {
  DaemonTargets result;
  const std::string text =
      value.has_value() ? std::string(absl::StripAsciiWhitespace(*value)) : std::string();
  const std::string keyword = absl::AsciiStrToLower(text);
  if (text.empty() || keyword == "auto") {
    for (const std::string& path : DefaultSocketCandidates(user)) {
      result.targets.push_back(absl::StrCat("unix:", path));
    }
    return result;
  }
  result.fixed = true;
  if (keyword == "embedded") {
    result.embedded = true;
    return result;
  }
  if (absl::StartsWith(text, "unix:") || absl::StartsWith(text, "/")) {
    std::string path = text;
    if (absl::StartsWith(text, "unix://")) {
      path = text.substr(7);  // "unix:///abs": an empty authority and an absolute path
    } else if (absl::StartsWith(text, "unix:")) {
      path = text.substr(5);
    }
    if (!absl::StartsWith(path, "/")) return Invalid(text, "a Unix socket path must be absolute");
    if (path.find('\0') != std::string::npos) return Invalid(text, "the path holds a NUL byte");
    if (path.size() > kMaxSocketPathBytes) {
      return Invalid(text, absl::StrCat("Unix socket paths are limited to ",
                                        kMaxSocketPathBytes, " bytes"));
    }
    result.targets.push_back(absl::StrCat("unix:", path));
    return result;
  }
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos || !ValidPort(text.substr(colon + 1))) {
    return Invalid(text, "expected a socket path or host:port (port 1-65535)");
  }
  const std::string host = text.substr(0, colon);
  if (absl::StartsWith(host, "[") && absl::EndsWith(host, "]")) {
    if (!ValidIpv6(host.substr(1, host.size() - 2))) {
      return Invalid(text, absl::StrCat(host, " is not an IPv6 address"));
    }
  } else if (!ValidHost(host)) {
    return Invalid(text, "expected a socket path or host:port");
  }
  result.targets.push_back(text);
  return result;
}

}  // namespace ddo
