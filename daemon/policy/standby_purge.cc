// File: daemon/policy/standby_purge.cc
#include "daemon/policy/standby_purge.h"

namespace ddo {

StandbyPurge DecideStandbyPurge(bool requested, const PlatformFacts& platform) {
  if (!requested) return {false, "disabled"};
  if (!platform.windows) return {false, "non_windows"};
  return {false, "windows_purge_not_built"};
}

}  // namespace ddo
