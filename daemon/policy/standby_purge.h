// File: daemon/policy/standby_purge.h
//
// Whether ddod purges the Windows standby list when a pipeline phase begins (the seed's
// DDO_PURGE_WINDOWS_STANDBY_<PHASE>, which the runner resolves and sends as Phase's
// purge_standby), and the reason it reports. ddod is not built for Windows yet, so nothing is
// ever purged; the reason tells a runner why.
//
// Thread-safety: a pure function.
#ifndef DDO_DAEMON_POLICY_STANDBY_PURGE_H_
#define DDO_DAEMON_POLICY_STANDBY_PURGE_H_

#include <string>

#include "daemon/policy/settings_resolver.h"

namespace ddo {

struct StandbyPurge {
  bool purged = false;
  // "disabled" (not asked), "non_windows", "windows_purge_not_built".
  std::string reason;
};

StandbyPurge DecideStandbyPurge(bool requested, const PlatformFacts& platform);

}  // namespace ddo

#endif  // DDO_DAEMON_POLICY_STANDBY_PURGE_H_
