#include "daemon/config/paths.h"

#include "absl/strings/str_cat.h"

namespace ddo {

SocketUser SocketUserOf(const UserContext& user) {
  SocketUser socket_user;
  socket_user.uid = user.uid;
  socket_user.xdg_runtime_dir = user.xdg_runtime_dir;
  return socket_user;
}

std::string DefaultSocketPath(const UserContext& user) {
  return DefaultSocketPath(SocketUserOf(user));
}

std::vector<std::string> DefaultSocketCandidates(const UserContext& user) {
  return DefaultSocketCandidates(SocketUserOf(user));
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
