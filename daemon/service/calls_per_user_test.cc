#include "daemon/service/calls_per_user.h"

#include <string>

#include "gtest/gtest.h"

namespace ddo {
namespace {

TEST(CallsPerUserTest, BoundsEachUserAloneAndNamesTheLimit) {
  CallsPerUser calls(2);
  ASSERT_TRUE(calls.Enter(1001, true).ok());
  ASSERT_TRUE(calls.Enter(1001, true).ok());
  const absl::Status third = calls.Enter(1001, true);
  EXPECT_TRUE(absl::IsResourceExhausted(third));
  EXPECT_NE(third.message().find("limit per user (2)"), std::string::npos);
  EXPECT_EQ(calls.running(1001), 2u);       // the refused call counted nothing
  EXPECT_TRUE(calls.Enter(1002, true).ok());  // another user is not affected
  EXPECT_TRUE(calls.Enter(0, false).ok());    // admins are not bound
  calls.Leave(1001);
  EXPECT_TRUE(calls.Enter(1001, true).ok());
  calls.Leave(4242);  // unknown: nothing happens
}

}  // namespace
}  // namespace ddo
