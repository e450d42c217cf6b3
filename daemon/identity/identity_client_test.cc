#include "daemon/identity/identity_client.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "daemon/common/temp_dir_for_test.h"
#include "daemon/identity/identity_server.h"
#include "gtest/gtest.h"

namespace ddo {
namespace {

// A socket file at `path`, as a daemon's.
UniqueFd BindSocket(const std::string& path) {
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::strncpy(address.sun_path, path.c_str(), sizeof(address.sun_path) - 1);
  EXPECT_EQ(::bind(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  return fd;
}

uid_t Stranger() { return ::geteuid() == 4242 ? 4243 : 4242; }

TEST(IdentityClientTest, ASocketMustBeTrustedAndInADirectoryNobodyElseWrites) {
  TempDirForTest dir;
  ASSERT_EQ(::chmod(dir.path().c_str(), 0700), 0);
  const std::string path = dir.path() + "/ddod.sock";
  UniqueFd socket = BindSocket(path);
  const std::set<uid_t> trusted{::geteuid()};
  EXPECT_TRUE(CheckSocketLocation(path, trusted).ok());

  ASSERT_EQ(::chmod(dir.path().c_str(), 0777), 0);  // anyone could have put it there
  absl::Status writable = CheckSocketLocation(path, trusted);
  EXPECT_TRUE(absl::IsPermissionDenied(writable));
  EXPECT_NE(writable.message().find("writable by it only"), std::string::npos);
  ASSERT_EQ(::chmod(dir.path().c_str(), 0700), 0);

  EXPECT_TRUE(absl::IsPermissionDenied(CheckSocketLocation(path, {Stranger()})));
  EXPECT_TRUE(absl::IsPermissionDenied(CheckSocketLocation(dir.path() + "/none", trusted)));
  if (::geteuid() == 0) {  // a socket file of another user in our directory
    ASSERT_EQ(::lchown(path.c_str(), Stranger(), static_cast<gid_t>(-1)), 0);
    absl::Status foreign = CheckSocketLocation(path, trusted);
    EXPECT_TRUE(absl::IsPermissionDenied(foreign));
    EXPECT_NE(foreign.message().find("belongs to uid"), std::string::npos);
  }
}

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
