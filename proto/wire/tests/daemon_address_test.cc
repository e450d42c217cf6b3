#include "ddo/wire/daemon_address.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ddo {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

SocketUser TestUser() {
  SocketUser user;
  user.uid = 1000;
  user.xdg_runtime_dir = "/run/user/1000";
  return user;
}

TEST(DaemonAddressTest, UnsetOrAutoTriesTheDefaultSockets) {
  for (std::optional<std::string> value :
       {std::optional<std::string>(), std::optional<std::string>(""),
        std::optional<std::string>("auto")}) {
    auto targets = ResolveDaemonTargets(value, TestUser());
    ASSERT_TRUE(targets.ok());
    EXPECT_FALSE(targets->fixed);
    EXPECT_THAT(targets->targets,
                ElementsAre("unix:/run/user/1000/ddo/ddod.sock", "unix:/run/ddo/ddod.sock"));
  }
}

TEST(DaemonAddressTest, FixedAddresses) {
  auto unix_path = ResolveDaemonTargets("/tmp/a.sock", TestUser());
  EXPECT_THAT(unix_path->targets, ElementsAre("unix:/tmp/a.sock"));
  EXPECT_TRUE(unix_path->fixed);
  EXPECT_THAT(ResolveDaemonTargets("unix:///tmp/a.sock", TestUser())->targets,
              ElementsAre("unix:/tmp/a.sock"));
  EXPECT_THAT(ResolveDaemonTargets("unix:/tmp/a.sock", TestUser())->targets,
              ElementsAre("unix:/tmp/a.sock"));
  EXPECT_THAT(ResolveDaemonTargets("127.0.0.1:50051", TestUser())->targets,
              ElementsAre("127.0.0.1:50051"));
  EXPECT_THAT(ResolveDaemonTargets("[::1]:7", TestUser())->targets, ElementsAre("[::1]:7"));
  auto embedded = ResolveDaemonTargets("embedded", TestUser());
  EXPECT_TRUE(embedded->embedded);
  EXPECT_TRUE(embedded->targets.empty());
}

TEST(DaemonAddressTest, InvalidValuesAreNamed) {
  for (const char* bad : {"unix:relative", "localhost", "host:99999", "host:port", ":80"}) {
    auto targets = ResolveDaemonTargets(bad, TestUser());
    ASSERT_FALSE(targets.ok()) << bad;
    EXPECT_THAT(std::string(targets.status().message()), HasSubstr("DDO_DAEMON"));
    EXPECT_THAT(std::string(targets.status().message()), HasSubstr(bad));
  }
}

TEST(DaemonAddressTest, UnixSocketPath) {
  EXPECT_EQ(UnixSocketPath("unix:/a/b"), "/a/b");
  EXPECT_EQ(UnixSocketPath("127.0.0.1:1"), "");
  EXPECT_EQ(TcpPort("127.0.0.1:50051"), 50051);
  EXPECT_EQ(TcpPort("[::1]:7"), 7);
  EXPECT_EQ(TcpPort("unix:/a:1"), 0);
}

TEST(DaemonAddressTest, AsThePythonClientRules) {
  for (const char* bad : {"[nothost]:80", "-bad-:80", "host:0", "host:+80", "a b:80"}) {
    EXPECT_FALSE(ResolveDaemonTargets(bad, TestUser()).ok()) << bad;
  }
  const std::string long_path = "/" + std::string(kMaxSocketPathBytes, 'a');
  auto too_long = ResolveDaemonTargets(long_path, TestUser());
  ASSERT_FALSE(too_long.ok());
  EXPECT_THAT(std::string(too_long.status().message()), HasSubstr("107 bytes"));
  EXPECT_TRUE(ResolveDaemonTargets("EMBEDDED", TestUser())->embedded);
  EXPECT_TRUE(ResolveDaemonTargets(" auto ", TestUser())->targets.size() == 2);
}

TEST(DaemonAddressTest, DefaultSocketsOfRootAndOfAUserWithoutRuntimeDir) {
  SocketUser root;
  EXPECT_THAT(DefaultSocketCandidates(root), ElementsAre("/run/ddo/ddod.sock"));
  SocketUser plain;
  plain.uid = 1234;
  EXPECT_EQ(DefaultSocketPath(plain), "/tmp/ddo-1234/ddod.sock");
  EXPECT_EQ(PerUserDirectory(1234), "/tmp/ddo-1234");
}

}  // namespace
}  // namespace ddo
