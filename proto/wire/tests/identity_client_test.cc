// Tests the client side against the daemon's server: the one wire test that uses daemon/.
#include "ddo/wire/identity_client.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

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

TEST(IdentityClientTest, AConnectionOverALimitSaysSo) {
  TempDirForTest dir;
  CallerRegistry callers;
  IdentityServerOptions options;
  options.socket_path = dir.path() + "/ddod.sock.id";
  options.limits.per_uid = 1;
  auto server = IdentityServer::Start(options, callers);
  ASSERT_TRUE(server.ok()) << server.status();
  auto first = IdentityLink::Connect(options.socket_path, TrustedDaemonUids(""), 5000);
  ASSERT_TRUE(first.ok()) << first.status();
  // ddod closes the second at once, unanswered; the error still says why it may have.
  auto second = IdentityLink::Connect(options.socket_path, TrustedDaemonUids(""), 5000);
  ASSERT_TRUE(absl::IsResourceExhausted(second.status())) << second.status();
  EXPECT_NE(second.status().message().find("ddod refused the identity connection"),
            std::string::npos);
  EXPECT_NE(second.status().message().find("a connection limit?"), std::string::npos);
}

// The C++ client opens segments through one link from several threads: each OPEN must get its
// own answer and descriptor (IdentityLink's mutex).
TEST(IdentityClientTest, ThreadsTakeTurnsOnOneLink) {
  TempDirForTest dir;
  CallerRegistry callers;
  IdentityServerOptions options;
  options.socket_path = dir.path() + "/ddod.sock.id";
  auto server = IdentityServer::Start(options, callers);
  ASSERT_TRUE(server.ok()) << server.status();
  auto link = IdentityLink::Connect(options.socket_path, TrustedDaemonUids(""), 5000);
  ASSERT_TRUE(link.ok()) << link.status();
  std::vector<std::string> names;
  for (int i = 0; i < 4; ++i) {
    names.push_back("/ddo-link-test-" + std::to_string(::getpid()) + "-" + std::to_string(i));
    UniqueFd segment(::shm_open(names.back().c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC,
                                0600));
    ASSERT_TRUE(segment.valid());
    ASSERT_EQ(::ftruncate(segment.get(), 4096 * (i + 1)), 0);  // sizes tell them apart
    callers.Grant(link->token(), names.back(), /*writable=*/i % 2 == 0);
  }
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] {
      for (int round = 0; round < 50; ++round) {
        absl::StatusOr<UniqueFd> fd = link->OpenSegment(names[i], /*writable=*/i % 2 == 0);
        struct stat info {};
        if (!fd.ok() || ::fstat(fd->get(), &info) != 0 || info.st_size != 4096 * (i + 1)) {
          ++wrong;
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(wrong.load(), 0);
  // A read-only grant refuses rw; an ungranted segment is refused; the link stays usable.
  EXPECT_TRUE(absl::IsFailedPrecondition(link->OpenSegment(names[1], true).status()));
  EXPECT_FALSE(link->OpenSegment("/ddo-link-test-none", false).ok());
  EXPECT_TRUE(link->OpenSegment(names[0], true).ok());
  for (const std::string& name : names) ::shm_unlink(name.c_str());
}

}  // namespace
}  // namespace ddo
