#include "daemon/config/paths.h"

#include "absl/strings/str_cat.h"

namespace ddo {

std::string DefaultSocketPath(const UserContext& user) {
  if (user.is_root()) {
    return kSystemSocketPath;
  }
  if (!user.xdg_runtime_dir.empty()) {
    return absl::StrCat(user.xdg_runtime_dir, "/ddo/ddod.sock");
  }
  return absl::StrCat("/tmp/ddo-", user.uid, "/ddod.sock");
}

std::vector<std::string> DefaultSocketCandidates(const UserContext& user) {
  std::vector<std::string> candidates = {DefaultSocketPath(user)};
  if (candidates.front() != kSystemSocketPath) {
    candidates.emplace_back(kSystemSocketPath);
  }
  return candidates;
}

std::string DefaultStateDir(const UserContext& user) {
  if (user.is_root()) {
    return "/var/lib/ddo";
  }
  if (!user.xdg_state_home.empty()) {
    return absl::StrCat(user.xdg_state_home, "/ddo");
  }
  if (user.home.empty()) {
    return absl::StrCat("/tmp/ddo-", user.uid, "/state");
  }
  return absl::StrCat(user.home, "/.local/state/ddo");
}

}  // namespace ddo
