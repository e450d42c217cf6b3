#include "daemon/server/socket_activation.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>

#include "daemon/common/temp_dir_for_test.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ddo {
namespace {

using ::testing::HasSubstr;

// A socket of `type`, bound to `path` (unbound when empty), listening when asked.
int MakeSocket(int type, const std::string& path, bool listening = true) {
  const int fd = ::socket(AF_UNIX, type | SOCK_CLOEXEC, 0);
  if (!path.empty()) {
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
    EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0) << path;
  }
  if (listening) {
    EXPECT_EQ(::listen(fd, 4), 0);
  }
  return fd;
}

bool IsOpen(int fd) { return ::fcntl(fd, F_GETFD) >= 0; }

TEST(SocketActivationTest, FindsBothSocketsInEitherOrder) {
  TempDirForTest dir;
  const std::string grpc_path = dir.Join("ddod.sock");
  const int identity = MakeSocket(SOCK_SEQPACKET, grpc_path + ".id");
  const int grpc = MakeSocket(SOCK_STREAM, grpc_path);
  absl::StatusOr<ActivatedSockets> sockets = ClassifyActivatedSockets({identity, grpc}, grpc_path);
  ASSERT_TRUE(sockets.ok()) << sockets.status();
  EXPECT_EQ(sockets->grpc.get(), grpc);
  EXPECT_EQ(sockets->identity.get(), identity);
}

TEST(SocketActivationTest, ASocketForAnotherPathIsRefusedAndEveryDescriptorClosed) {
  TempDirForTest dir;
  const std::string grpc_path = dir.Join("ddod.sock");
  const int grpc = MakeSocket(SOCK_STREAM, dir.Join("other.sock"));
  const int identity = MakeSocket(SOCK_SEQPACKET, grpc_path + ".id");
  absl::StatusOr<ActivatedSockets> sockets = ClassifyActivatedSockets({identity, grpc}, grpc_path);
  ASSERT_FALSE(sockets.ok());
  EXPECT_EQ(sockets.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(sockets.status().message(), HasSubstr("bound to " + dir.Join("other.sock")));
  EXPECT_THAT(sockets.status().message(), HasSubstr("ListenStream=" + grpc_path));
  EXPECT_FALSE(IsOpen(grpc));
  EXPECT_FALSE(IsOpen(identity));
}

TEST(SocketActivationTest, WrongTypesAndNonSocketsAreNamed) {
  TempDirForTest dir;
  const std::string grpc_path = dir.Join("ddod.sock");
  // The identity path, but a stream socket: it must be SOCK_SEQPACKET.
  const int stream_at_identity = MakeSocket(SOCK_STREAM, grpc_path + ".id");
  const int grpc = MakeSocket(SOCK_STREAM, grpc_path);
  absl::StatusOr<ActivatedSockets> sockets =
      ClassifyActivatedSockets({grpc, stream_at_identity}, grpc_path);
  ASSERT_FALSE(sockets.ok());
  EXPECT_THAT(sockets.status().message(), HasSubstr("SOCK_STREAM socket bound to " + grpc_path +
                                                    ".id"));

  const int file = ::open(dir.Join("").c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  sockets = ClassifyActivatedSockets({file}, grpc_path);
  ASSERT_FALSE(sockets.ok());
  EXPECT_THAT(sockets.status().message(), HasSubstr("is not a socket"));

  const int not_listening = MakeSocket(SOCK_STREAM, "", /*listening=*/false);
  sockets = ClassifyActivatedSockets({not_listening}, grpc_path);
  ASSERT_FALSE(sockets.ok());
  EXPECT_THAT(sockets.status().message(), HasSubstr("without a path"));
}

TEST(SocketActivationTest, OneMissingOrOneTwiceIsRefused) {
  TempDirForTest dir;
  const std::string grpc_path = dir.Join("ddod.sock");
  const int grpc = MakeSocket(SOCK_STREAM, grpc_path);
  absl::StatusOr<ActivatedSockets> sockets = ClassifyActivatedSockets({grpc}, grpc_path);
  ASSERT_FALSE(sockets.ok());
  EXPECT_THAT(sockets.status().message(),
              HasSubstr("not the identity socket " + grpc_path + ".id"));

  const int first = MakeSocket(SOCK_SEQPACKET, grpc_path + ".id");
  const int again = ::dup(first);
  sockets = ClassifyActivatedSockets({first, again}, grpc_path);
  ASSERT_FALSE(sockets.ok());
  EXPECT_THAT(sockets.status().message(), HasSubstr("came twice"));
}

}  // namespace
}  // namespace ddo
