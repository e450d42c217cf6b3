// File: daemon/policy/settings_resolver.h
//
// Resolves the DDO_* settings of one API call, once, in ddod, so that every client gets the
// same answer (docs/configuration.md §2). For a library setting the first of these that has
// it wins: the request's explicit overrides, the client's DDO_* environment, ddod's own
// DDO_* environment, the preset, the built-in default. DDO_PRESET in the client's environment
// overrides the request's preset; "" means no preset. Per component (research/seed-ddo.md
// §3.3): an override of DDO_<C>_<NAME>, the component policy, DDO_<C>_<NAME>, then
// DDO_RUNNER_<C>_<NAME> (each from the environment, ddod's environment, then the preset; an
// empty value moves on), then the default. Platform rules apply last: on WSL with
// DDO_DISABLE_PIN_ON_WSL, nothing is pinned and group offload runs without streams.
//
// Thread-safety: a pure function of its arguments.
#ifndef DDO_DAEMON_POLICY_SETTINGS_RESOLVER_H_
#define DDO_DAEMON_POLICY_SETTINGS_RESOLVER_H_

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "ddo/v1/settings.pb.h"

namespace ddo {

// Platform facts the rules depend on; tests set them freely.
struct PlatformFacts {
  bool wsl = false;
  bool windows = false;
};

// InvalidArgument for an unknown preset, or a value its setting does not accept (the message
// names the variable, the value, where it came from and what is valid).
absl::StatusOr<ddo::v1::ResolvedSettings> ResolveSettings(
    const ddo::v1::ResolveSettingsRequest& request,
    const std::map<std::string, std::string>& daemon_environment, const PlatformFacts& platform);

}  // namespace ddo

#endif  // DDO_DAEMON_POLICY_SETTINGS_RESOLVER_H_
