// File: daemon/config/environment.h
//
// The process environment as a value, so that option resolution is a pure function that
// tests can feed any environment, and the user facts (uid, home, XDG directories) that decide
// default paths. environment.cc holds what both systems share; environment_posix.cc and
// environment_windows.cc read the process's own.
//
// Thread-safety: Environment and UserContext are values; ProcessEnvironment reads environ, so
// call it (and FromProcess) before other threads may setenv: ddod does at start.
#ifndef DDO_DAEMON_CONFIG_ENVIRONMENT_H_
#define DDO_DAEMON_CONFIG_ENVIRONMENT_H_

#include <map>
#include <optional>
#include <string>
#include "absl/strings/string_view.h"
#include "ddo/os/user_ids.h"

namespace ddo {

using Environment = std::map<std::string, std::string, std::less<>>;

// A copy of this process's environment.
Environment ProcessEnvironment();

// The value of `name`, or nullopt when it is unset or empty (an empty value means "not set",
// as in the seed).
std::optional<std::string> Lookup(const Environment& env, absl::string_view name);

// Adds one "NAME=VALUE" entry of a process's environment to `env` (the first of a name wins);
// an entry without a name is skipped.
void AddEnvironmentEntry(absl::string_view entry, Environment& env);

struct UserContext {
  uid_t uid = 0;
  std::string home;             // $HOME
  std::string xdg_runtime_dir;  // $XDG_RUNTIME_DIR, may be empty
  std::string xdg_state_home;   // $XDG_STATE_HOME, may be empty

  bool is_root() const { return uid == 0; }

  // The calling process's user and environment.
  static UserContext FromProcess(const Environment& env);
};

}  // namespace ddo

#endif  // DDO_DAEMON_CONFIG_ENVIRONMENT_H_
