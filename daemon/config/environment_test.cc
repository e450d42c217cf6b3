#include "daemon/config/environment.h"

#include <cstdlib>

#include "gtest/gtest.h"

namespace ddo {
namespace {

TEST(EnvironmentTest, EntriesSplitAtTheFirstEqualsSign) {
  Environment env;
  AddEnvironmentEntry("DDO_RAM_BUDGET_GB=24", env);
  AddEnvironmentEntry("DDO_LOG_FORMAT=a=b", env);
  AddEnvironmentEntry("DDO_RAM_BUDGET_GB=8", env);  // the first one wins
  AddEnvironmentEntry("=C:=C:\\Users", env);         // Windows' per-drive entries: no name
  AddEnvironmentEntry("NO_EQUALS_SIGN", env);
  AddEnvironmentEntry("DDO_EMPTY=", env);
  EXPECT_EQ(env.size(), 3u);
  EXPECT_EQ(Lookup(env, "DDO_RAM_BUDGET_GB"), "24");
  EXPECT_EQ(Lookup(env, "DDO_LOG_FORMAT"), "a=b");
  EXPECT_EQ(Lookup(env, "DDO_EMPTY"), std::nullopt) << "empty means unset";
  EXPECT_EQ(Lookup(env, "DDO_ABSENT"), std::nullopt);
}

TEST(EnvironmentTest, TheProcessEnvironmentShowsWhatWasSet) {
#ifdef _WIN32
  ASSERT_EQ(::_wputenv_s(L"DDO_ENVIRONMENT_TEST", L"d\u00e9j\u00e0 vu"), 0);
#else
  ASSERT_EQ(::setenv("DDO_ENVIRONMENT_TEST", "d\xc3\xa9j\xc3\xa0 vu", 1), 0);
#endif
  const Environment env = ProcessEnvironment();
  EXPECT_EQ(Lookup(env, "DDO_ENVIRONMENT_TEST"), "d\xc3\xa9j\xc3\xa0 vu") << "UTF-8 both ways";
  const UserContext user = UserContext::FromProcess(env);
  EXPECT_FALSE(user.home.empty()) << "$HOME, or %USERPROFILE% on Windows";
}

}  // namespace
}  // namespace ddo
