#include "daemon/config/environment.h"

#include <pwd.h>
#include <unistd.h>

extern char** environ;

namespace ddo {

Environment ProcessEnvironment() {
  Environment env;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    absl::string_view text(*entry);
    const size_t eq = text.find('=');
    if (eq == absl::string_view::npos) {
      continue;
    }
    env.emplace(std::string(text.substr(0, eq)), std::string(text.substr(eq + 1)));
  }
  return env;
}

std::optional<std::string> Lookup(const Environment& env, absl::string_view name) {
  auto it = env.find(name);
  if (it == env.end() || it->second.empty()) {
    return std::nullopt;
  }
  return it->second;
}

UserContext UserContext::FromProcess(const Environment& env) {
  UserContext user;
  user.uid = ::getuid();
  user.home = Lookup(env, "HOME").value_or("");
  if (user.home.empty()) {
    if (const passwd* entry = ::getpwuid(user.uid); entry != nullptr && entry->pw_dir != nullptr) {
      user.home = entry->pw_dir;
    }
  }
  user.xdg_runtime_dir = Lookup(env, "XDG_RUNTIME_DIR").value_or("");
  user.xdg_state_home = Lookup(env, "XDG_STATE_HOME").value_or("");
  return user;
}

}  // namespace ddo
