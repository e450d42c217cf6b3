// File: daemon/policy/settings_resolver.h
//
// Resolves the DDO_* settings of one API call, once, in ddod, so that every client gets the
// same answer (docs/configuration.md §2). For a library setting the first of these that has
// it wins: the request's explicit overrides, the client's DDO_* environment, ddod's own
// DDO_* environment, the preset, the built-in default. DDO_PRESET in the client's environment
// overrides the request's preset; "" means no preset. Per component: an override of
// DDO_<C>_<NAME>, the component policy, DDO_<C>_<NAME>, then DDO_RUNNER_<C>_<NAME> (each
// from the environment, ddod's environment, then the preset; an empty value moves on), then
// the default. Platform rules apply last: on WSL with DDO_DISABLE_PIN_ON_WSL, nothing is
// pinned and group offload runs without streams.
//
// Thread-safety: a pure function of its arguments.
#ifndef DDO_DAEMON_POLICY_SETTINGS_RESOLVER_H_
#define DDO_DAEMON_POLICY_SETTINGS_RESOLVER_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ddo {

// Platform facts the rules depend on; tests set them freely.
struct PlatformFacts {
  bool wsl = false;
  bool windows = false;
};

// What one API call asks to resolve (ResolveSettingsRequest).
struct SettingsRequest {
  std::string preset;  // the preset= argument; "" means none
  std::map<std::string, std::string> environment;  // the client's DDO_* variables
  std::map<std::string, std::string> overrides;    // explicit arguments, by variable name
  std::vector<std::string> components;
  // component_policies={"transformer": {"route": ...}} of the seed's API.
  std::map<std::string, std::map<std::string, std::string>> component_policies;
};

// Where a resolved value came from.
enum class SettingSource {
  kDefault,
  kPreset,
  kDaemon,
  kEnvironment,
  kRequest,
  kComponentPolicy,
  kPlatform,  // a platform rule changed the value
};

struct SettingValue {
  std::string name;   // the DDO_* variable
  std::string value;  // normalised ("1"/"0" for booleans)
  SettingSource source = SettingSource::kDefault;
};

struct ResolvedComponent {
  std::string component;
  std::string variable_prefix;  // "DDO_<C>_"
  std::vector<SettingValue> values;
};

struct ResolvedSettings {
  std::string requested_preset;
  std::string effective_preset;
  std::vector<SettingValue> values;
  std::vector<ResolvedComponent> components;

  // The library values and those of components[component_index] by name.
  std::map<std::string, std::string> ValuesByName(size_t component_index) const;
};

// InvalidArgument for an unknown preset, or a value its setting does not accept (the message
// names the variable, the value, where it came from and what is valid).
absl::StatusOr<ResolvedSettings> ResolveSettings(
    const SettingsRequest& request, const std::map<std::string, std::string>& daemon_environment,
    const PlatformFacts& platform);

}  // namespace ddo

#endif  // DDO_DAEMON_POLICY_SETTINGS_RESOLVER_H_
