// Tests the client side against the daemon's server: the one wire test that uses daemon/.
#include "ddo/wire/identity_client.h"

#include <unistd.h>

#include <string>

#include "daemon/common/temp_dir_for_test.h"
#include "daemon/identity/identity_server.h"
#include "gtest/gtest.h"

namespace ddo {
namespace {

uid_t Stranger() { return ::geteuid() == 4242 ? 4243 : 4242; }

TEST(IdentityClientTest, ADaemonOfAnUntrustedUserIsRefusedBeforeAnythingIsSent) {
  TempDirForTest dir;
  CallerRegistry callers;
  IdentityServerOptions options;
  options.socket_path = dir.path() + "/ddod.sock.id";
  auto server = IdentityServer::Start(options, callers);
  ASSERT_TRUE(server.ok()) << server.status();
  auto refused = IdentityLink::Connect(options.socket_path, {Stranger()});
  ASSERT_TRUE(absl::IsPermissionDenied(refused.status())) << refused.status();
  EXPECT_NE(refused.status().message().find("runs as uid"), std::string::npos);
  EXPECT_EQ(callers.size(), 0u);  // no HELLO reached it
  auto link = IdentityLink::Connect(options.socket_path, TrustedDaemonUids(""));
  ASSERT_TRUE(link.ok()) << link.status();
  EXPECT_EQ(link->token().size(), 32u);
  EXPECT_EQ(link->daemon_uid(), ::geteuid());
}

}  // namespace
}  // namespace ddo
