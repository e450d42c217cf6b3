// File: daemon/policy/standby_purge_test.cc
#include "daemon/policy/standby_purge.h"

#include <gtest/gtest.h>

namespace ddo {
namespace {

TEST(StandbyPurgeTest, NothingIsPurgedAndTheReasonSaysWhy) {
  PlatformFacts linux_host;
  PlatformFacts windows_host;
  windows_host.windows = true;
  EXPECT_EQ(DecideStandbyPurge(false, windows_host).reason, "disabled");
  EXPECT_EQ(DecideStandbyPurge(true, linux_host).reason, "non_windows");
  EXPECT_EQ(DecideStandbyPurge(true, windows_host).reason, "windows_purge_not_built");
  for (bool requested : {false, true}) {
    EXPECT_FALSE(DecideStandbyPurge(requested, windows_host).purged);
    EXPECT_FALSE(DecideStandbyPurge(requested, linux_host).purged);
  }
}

}  // namespace
}  // namespace ddo
