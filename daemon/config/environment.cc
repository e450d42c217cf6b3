// The environment as a value: the lookup rule both systems share.
#include "daemon/config/environment.h"

namespace ddo {

std::optional<std::string> Lookup(const Environment& env, absl::string_view name) {
  auto it = env.find(name);
  if (it == env.end() || it->second.empty()) {
    return std::nullopt;
  }
  return it->second;
}

void AddEnvironmentEntry(absl::string_view entry, Environment& env) {
  const size_t eq = entry.find('=');
  // No '=', or one that starts the entry (Windows' per-drive "=C:=C:\..." entries): no variable.
  if (eq == absl::string_view::npos || eq == 0) return;
  env.emplace(std::string(entry.substr(0, eq)), std::string(entry.substr(eq + 1)));
}

}  // namespace ddo
