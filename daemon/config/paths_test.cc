#include "daemon/config/paths.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ddo {
namespace {

using ::testing::ElementsAre;

UserContext User(uid_t uid, std::string runtime_dir, std::string state_home = "") {
  UserContext user;
  user.uid = uid;
  user.home = "/home/ann";
  user.xdg_runtime_dir = std::move(runtime_dir);
  user.xdg_state_home = std::move(state_home);
  return user;
}

TEST(PathsTest, RootUsesTheSystemSocketAndState) {
  EXPECT_EQ(DefaultSocketPath(User(0, "/run/user/0")), "/run/ddo/ddod.sock");
  EXPECT_EQ(DefaultStateDir(User(0, "")), "/var/lib/ddo");
  EXPECT_THAT(DefaultSocketCandidates(User(0, "")), ElementsAre("/run/ddo/ddod.sock"));
}

TEST(PathsTest, UsersUseTheirRuntimeDirThenTheSystemService) {
  EXPECT_EQ(DefaultSocketPath(User(1000, "/run/user/1000")), "/run/user/1000/ddo/ddod.sock");
  EXPECT_THAT(DefaultSocketCandidates(User(1000, "/run/user/1000")),
              ElementsAre("/run/user/1000/ddo/ddod.sock", "/run/ddo/ddod.sock"));
}

TEST(PathsTest, UsersWithoutRuntimeDirGetAPerUidTmpDir) {
  EXPECT_EQ(DefaultSocketPath(User(1000, "")), "/tmp/ddo-1000/ddod.sock");
}

TEST(PathsTest, StateDirFollowsXdg) {
  EXPECT_EQ(DefaultStateDir(User(1000, "", "/data/state")), "/data/state/ddo");
  EXPECT_EQ(DefaultStateDir(User(1000, "")), "/home/ann/.local/state/ddo");
}

}  // namespace
}  // namespace ddo
