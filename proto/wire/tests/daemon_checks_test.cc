#include "ddo/wire/daemon_checks.h"

#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "ddo/wire/daemon_address.h"
#include "ddo/wire/unique_fd.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ddo {
namespace {

using ::testing::HasSubstr;

// A private directory under /tmp, removed with its contents (wire tests use nothing of daemon/).
class TempDir {
 public:
  TempDir() {
    char pattern[] = "/tmp/ddo-wire-test-XXXXXX";
    path_ = ::mkdtemp(pattern) != nullptr ? pattern : "";
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

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

TEST(DaemonChecksTest, ASocketMustBeTrustedAndInADirectoryNobodyElseWrites) {
  TempDir dir;
  ASSERT_EQ(::chmod(dir.path().c_str(), 0700), 0);
  const std::string path = dir.path() + "/ddod.sock";
  UniqueFd socket = BindSocket(path);
  const std::set<uid_t> trusted{::geteuid()};
  EXPECT_TRUE(CheckSocketLocation(path, trusted).ok());

  ASSERT_EQ(::chmod(dir.path().c_str(), 0777), 0);  // anyone could have put it there
  absl::Status writable = CheckSocketLocation(path, trusted);
  EXPECT_TRUE(absl::IsPermissionDenied(writable));
  EXPECT_THAT(std::string(writable.message()), HasSubstr("writable by it only"));
  ASSERT_EQ(::chmod(dir.path().c_str(), 0700), 0);

  EXPECT_TRUE(absl::IsPermissionDenied(CheckSocketLocation(path, {Stranger()})));
  EXPECT_TRUE(absl::IsPermissionDenied(CheckSocketLocation(dir.path() + "/none", trusted)));
  if (::geteuid() == 0) {  // a socket file of another user in our directory
    ASSERT_EQ(::lchown(path.c_str(), Stranger(), static_cast<gid_t>(-1)), 0);
    absl::Status foreign = CheckSocketLocation(path, trusted);
    EXPECT_TRUE(absl::IsPermissionDenied(foreign));
    EXPECT_THAT(std::string(foreign.message()), HasSubstr("belongs to uid"));
  }
}

TEST(DaemonChecksTest, ThePerUserDirectoryIsTheUsersOwnWithMode0700) {
  TempDir dir;
  const std::string own = dir.path() + "/ddo-me";
  ASSERT_EQ(::mkdir(own.c_str(), 0700), 0);
  ASSERT_EQ(::chmod(own.c_str(), 0700), 0);
  EXPECT_TRUE(CheckPerUserDirectory(own, ::geteuid()).ok());

  ASSERT_EQ(::chmod(own.c_str(), 0755), 0);  // readable: not private, though nobody can write
  absl::Status loose = CheckPerUserDirectory(own, ::geteuid());
  EXPECT_TRUE(absl::IsPermissionDenied(loose));
  EXPECT_THAT(std::string(loose.message()), HasSubstr("mode 0755"));
  EXPECT_THAT(std::string(loose.message()), HasSubstr("mode 0700"));
  ASSERT_EQ(::chmod(own.c_str(), 0700), 0);

  EXPECT_TRUE(absl::IsPermissionDenied(CheckPerUserDirectory(own, Stranger())));
  const std::string link = dir.path() + "/ddo-link";
  ASSERT_EQ(::symlink(own.c_str(), link.c_str()), 0);  // a link is never accepted
  EXPECT_TRUE(absl::IsPermissionDenied(CheckPerUserDirectory(link, ::geteuid())));
  EXPECT_TRUE(absl::IsPermissionDenied(CheckPerUserDirectory(dir.path() + "/none", 0)));
}

TEST(DaemonChecksTest, TheRealPerUserDirectoryIsCheckedWhenItHoldsTheSocket) {
  const std::string own = PerUserDirectory(::geteuid());
  struct stat info {};
  if (::lstat(own.c_str(), &info) != 0 || (info.st_mode & 07777) != 0700) {
    GTEST_SKIP() << own << " is absent or not 0700 here; the check itself is tested above";
  }
  EXPECT_FALSE(CheckSocketLocation(own + "/no-such.sock", {::geteuid()}).ok());  // no socket
}

// A /proc/net/tcp-format table: header, then "sl local rem st ... uid" rows.
std::string WriteTable(const TempDir& dir, const std::string& name, const std::string& rows) {
  const std::string path = dir.path() + "/" + name;
  std::ofstream(path)
      << "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid\n"
      << rows;
  return path;
}

// 0xC383 = 50051; 0x1F90 = 8080. State 0A listens, 01 is an established connection.
constexpr char kRows[] =
    "   0: 0100007F:C383 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000 0 1\n"
    "   1: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000  4242 0 2\n"
    "   2: 0100007F:C383 0100007F:9C40 01 00000000:00000000 00:00000000 00000000  4242 0 3\n";

TEST(DaemonChecksTest, EveryTcpListenerOnThePortMustBeTrusted) {
  TempDir dir;
  const std::string table = WriteTable(dir, "tcp", kRows);
  EXPECT_TRUE(CheckTcpListener("127.0.0.1:50051", 50051, {1000}, {table}).ok());

  absl::Status stranger = CheckTcpListener("127.0.0.1:8080", 8080, {1000}, {table});
  EXPECT_TRUE(absl::IsPermissionDenied(stranger));
  EXPECT_THAT(std::string(stranger.message()), HasSubstr("port 8080 is held by uid 4242"));

  // What a client asks before dialing: nothing listens (skip the address), or who does.
  EXPECT_TRUE(TcpListenerOwners(9, {table}).empty());
  EXPECT_EQ(TcpListenerOwners(8080, {table}), std::set<uid_t>({4242}));

  absl::Status nobody = CheckTcpListener("127.0.0.1:9", 9, {1000}, {table, dir.path() + "/no"});
  EXPECT_TRUE(absl::IsPermissionDenied(nobody));
  EXPECT_THAT(std::string(nobody.message()), HasSubstr("no listener on port 9"));

  // An IPv6 listener of another user on the same port is refused too.
  const std::string table6 = WriteTable(
      dir, "tcp6",
      "   0: 00000000000000000000000001000000:C383 00000000000000000000000000000000:0000 0A "
      "00000000:00000000 00:00000000 00000000  4242 0 4\n");
  EXPECT_TRUE(absl::IsPermissionDenied(
      CheckTcpListener("127.0.0.1:50051", 50051, {1000}, {table, table6})));
}

TEST(DaemonChecksTest, TrustedUidsAreSelfRootAndAnExistingServiceUser) {
  const std::set<uid_t> trusted = TrustedDaemonUids("no-such-user-ddo-test");
  EXPECT_EQ(trusted, (std::set<uid_t>{::geteuid(), 0}));
  EXPECT_TRUE(TrustedDaemonUids("root").count(0) == 1);
}

}  // namespace
}  // namespace ddo
