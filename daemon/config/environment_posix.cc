// The process's environment and user on POSIX: environ, getuid, $HOME or the password file.
#include <pwd.h>
#include <unistd.h>

#include "daemon/config/environment.h"

extern char** environ;

namespace ddo {

Environment ProcessEnvironment() {
  Environment env;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    AddEnvironmentEntry(*entry, env);
  }
  return env;
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
