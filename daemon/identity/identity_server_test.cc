#include "daemon/identity/identity_server.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"

#include "daemon/common/temp_dir_for_test.h"
#include "ddo/wire/seqpacket.h"
#include "gtest/gtest.h"

namespace ddo {
namespace {

// A client of the identity socket, as a runner would be.
class Client {
 public:
  explicit Client(const std::string& path) {
    fd_ = UniqueFd(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::strncpy(address.sun_path, path.c_str(), sizeof(address.sun_path) - 1);
    connected_ = ::connect(fd_.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
  }
  bool connected() const { return connected_; }

  // "closed" once ddod closed the connection, "open" when it still is after `limit`.
  std::string WaitForClose(absl::Duration limit) {
    pollfd polled = {fd_.get(), POLLIN, 0};
    if (::poll(&polled, 1, static_cast<int>(absl::ToInt64Milliseconds(limit))) <= 0) {
      return "open";
    }
    absl::StatusOr<Packet> packet = ReceivePacket(fd_.get(), 4096, MSG_DONTWAIT);
    return packet.ok() ? "a packet" : "closed";
  }

  // Sends `text` (with `fd` when >= 0) and returns the answer; `received` gets a passed fd.
  std::string Ask(const std::string& text, int fd = -1, UniqueFd* received = nullptr) {
    if (!SendPacket(fd_.get(), text, fd)) return "send failed";
    absl::StatusOr<Packet> answer = ReceivePacket(fd_.get(), 4096);
    if (!answer.ok()) return "closed";
    if (received != nullptr && !answer->fds.empty()) *received = std::move(answer->fds.front());
    return answer->text;
  }

 private:
  UniqueFd fd_;
  bool connected_ = false;
};

// Polls `condition` for up to 5 s.
template <typename Condition>
bool WaitUntil(Condition condition) {
  const absl::Time give_up = absl::Now() + absl::Seconds(5);
  while (!condition()) {
    if (absl::Now() > give_up) return false;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return true;
}

class IdentityServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    IdentityServerOptions options;
    options.socket_path = dir_.path() + "/ddod.sock.id";
    options.limits.per_uid = 4;
    options.hello_deadline = absl::Milliseconds(300);
    auto server = IdentityServer::Start(options, callers_);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
  }

  TempDirForTest dir_;
  CallerRegistry callers_;
  std::unique_ptr<IdentityServer> server_;
};

TEST_F(IdentityServerTest, TheSocketIsOwnerOnlyAndTheKernelNamesTheCaller) {
  struct stat info {};
  ASSERT_EQ(::stat(server_->socket_path().c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0600u);
  Client client(server_->socket_path());
  ASSERT_TRUE(client.connected());
  const std::string answer = client.Ask("HELLO 1");
  ASSERT_EQ(answer.rfind("OK ", 0), 0u) << answer;
  auto caller = callers_.Find(answer.substr(3));
  ASSERT_TRUE(caller.ok());
  EXPECT_EQ(caller->uid, ::geteuid());
  EXPECT_EQ(caller->pid, ::getpid());
  EXPECT_EQ(client.Ask("HELLO 1"), answer);  // one token per connection
}

TEST_F(IdentityServerTest, TheTokenEndsWithItsConnection) {
  std::string token;
  {
    Client client(server_->socket_path());
    token = client.Ask("HELLO 1").substr(3);
    ASSERT_TRUE(callers_.Find(token).ok());
  }
  for (int i = 0; i < 200 && callers_.Find(token).ok(); ++i) ::usleep(10000);
  EXPECT_FALSE(callers_.Find(token).ok());
}

TEST_F(IdentityServerTest, FilesArePassedAndNonRegularFilesRefused) {
  Client client(server_->socket_path());
  EXPECT_EQ(client.Ask("FILE x.safetensors", ::open("/dev/null", O_RDONLY)).rfind("ERR ", 0),
            0u);  // before HELLO
  const std::string token = client.Ask("HELLO 1").substr(3);
  const std::string path = dir_.path() + "/x.safetensors";
  UniqueFd file(::open(path.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0600));
  const std::string answer = client.Ask("FILE x.safetensors", file.get());
  ASSERT_EQ(answer.rfind("OK ", 0), 0u) << answer;
  auto taken = callers_.TakeFiles(token, {std::stoull(answer.substr(3))});
  ASSERT_TRUE(taken.ok());
  EXPECT_EQ((*taken)[0].name, "x.safetensors");
  // A FIFO is refused at once; nothing blocks.
  const std::string fifo = dir_.path() + "/pipe";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  UniqueFd pipe(::open(fifo.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC));
  EXPECT_EQ(client.Ask("FILE pipe", pipe.get()).rfind("ERR ", 0), 0u);
  UniqueFd directory(::open(dir_.path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  EXPECT_EQ(client.Ask("FILE dir", directory.get()).rfind("ERR ", 0), 0u);
  // The connection stays usable after refusals.
  EXPECT_EQ(client.Ask("HELLO 1"), "OK " + token);
}

TEST_F(IdentityServerTest, FilesMustBeOpenForReading) {
  Client client(server_->socket_path());
  client.Ask("HELLO 1");
  const std::string path = dir_.path() + "/x.safetensors";
  UniqueFd made(::open(path.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0600));
  ASSERT_TRUE(made.valid());
  // O_PATH needs no read permission on the file, O_WRONLY none either: neither is a proof.
  UniqueFd by_path(::open(path.c_str(), O_PATH | O_CLOEXEC));
  UniqueFd write_only(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
  EXPECT_EQ(client.Ask("FILE x.safetensors", by_path.get()).rfind("ERR ", 0), 0u);
  EXPECT_EQ(client.Ask("FILE x.safetensors", write_only.get()).rfind("ERR ", 0), 0u);
  UniqueFd read_only(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  EXPECT_EQ(client.Ask("FILE x.safetensors", read_only.get()).rfind("OK ", 0), 0u);
  EXPECT_EQ(client.Ask("FILE x.safetensors", made.get()).rfind("OK ", 0), 0u);  // O_RDWR
}

TEST_F(IdentityServerTest, OpenServesOnlyGrantedSegmentsWithTheGrantedAccess) {
  const std::string name = "/ddo-identity-test-" + std::to_string(::getpid());
  UniqueFd segment(::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600));
  ASSERT_TRUE(segment.valid());
  ASSERT_EQ(::ftruncate(segment.get(), 4096), 0);
  Client client(server_->socket_path());
  const std::string token = client.Ask("HELLO 1").substr(3);
  UniqueFd received;
  EXPECT_EQ(client.Ask("OPEN " + name + " ro", -1, &received).rfind("ERR ", 0), 0u);
  EXPECT_FALSE(received.valid());
  callers_.Grant(token, name, /*writable=*/false);
  EXPECT_EQ(client.Ask("OPEN " + name + " rw", -1, &received).rfind("ERR ", 0), 0u);
  EXPECT_EQ(client.Ask("OPEN " + name + " ro", -1, &received), "OK");
  ASSERT_TRUE(received.valid());
  EXPECT_EQ(::fcntl(received.get(), F_GETFL) & O_ACCMODE, O_RDONLY);
  ::shm_unlink(name.c_str());
}

TEST_F(IdentityServerTest, OpenOfAFileGrantServesItsDescriptorReadOnly) {
  const std::string path = dir_.path() + "/w.safetensors";
  {
    UniqueFd made(::open(path.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600));
    ASSERT_TRUE(made.valid());
    ASSERT_EQ(::write(made.get(), "weights", 7), 7);
  }
  auto held = std::make_shared<const UniqueFd>(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  ASSERT_TRUE(held->valid());
  const std::string name = "/ddo-file-test-" + std::to_string(::getpid());
  Client client(server_->socket_path());
  const std::string token = client.Ask("HELLO 1").substr(3);
  UniqueFd received;
  const std::string refused = client.Ask("OPEN " + name + " ro", -1, &received);
  EXPECT_EQ(refused.rfind("ERR ", 0), 0u);
  EXPECT_EQ(refused.find(name), std::string::npos) << "an ungranted name is not echoed";
  EXPECT_FALSE(received.valid());
  SegmentGrant grant = SegmentGrant::File(name, held);
  grant.writable = true;  // asked for, never given
  callers_.Grant(token, grant);
  // Read-write is refused, even though the grant asked for it.
  const std::string denied = client.Ask("OPEN " + name + " rw", -1, &received);
  EXPECT_EQ(denied.rfind("ERR ", 0), 0u) << denied;
  EXPECT_NE(denied.find("read-only"), std::string::npos) << denied;
  EXPECT_FALSE(received.valid());
  ASSERT_EQ(client.Ask("OPEN " + name + " ro", -1, &received), "OK");
  ASSERT_TRUE(received.valid());
  EXPECT_NE(received.get(), held->get());
  EXPECT_EQ(::fcntl(received.get(), F_GETFL) & O_ACCMODE, O_RDONLY);
  struct stat got {};
  struct stat want {};
  ASSERT_EQ(::fstat(received.get(), &got), 0);
  ASSERT_EQ(::fstat(held->get(), &want), 0);
  EXPECT_EQ(got.st_ino, want.st_ino);
  EXPECT_EQ(got.st_dev, want.st_dev);
  char bytes[8] = {};
  ASSERT_EQ(::pread(received.get(), bytes, 7, 0), 7);
  EXPECT_EQ(std::string(bytes, 7), "weights");
  // A grant over a descriptor that could write is never served, not even read-only.
  auto writable = std::make_shared<const UniqueFd>(::open(path.c_str(), O_RDWR | O_CLOEXEC));
  callers_.Grant(token, SegmentGrant::File(name + "-rw", writable));
  UniqueFd none;
  EXPECT_EQ(client.Ask("OPEN " + name + "-rw ro", -1, &none).rfind("ERR ", 0), 0u);
  EXPECT_FALSE(none.valid());
  // The file grant is this connection's only.
  Client other(server_->socket_path());
  other.Ask("HELLO 1");
  EXPECT_EQ(other.Ask("OPEN " + name + " ro", -1, &none).rfind("ERR ", 0), 0u);
  EXPECT_FALSE(none.valid());
}

TEST_F(IdentityServerTest, ConnectionsPerUidAreBounded) {
  std::vector<std::unique_ptr<Client>> clients;
  for (int i = 0; i < 4; ++i) {
    clients.push_back(std::make_unique<Client>(server_->socket_path()));
    ASSERT_EQ(clients.back()->Ask("HELLO 1").rfind("OK ", 0), 0u);
  }
  // The fifth is closed at once, unanswered: kept to answer, it would hold a slot.
  Client fifth(server_->socket_path());
  EXPECT_EQ(fifth.WaitForClose(absl::Seconds(2)), "closed");
  clients.pop_back();
  EXPECT_TRUE(WaitUntil([&] {
    Client another(server_->socket_path());
    return another.Ask("HELLO 1").rfind("OK ", 0) == 0;
  })) << "a closed connection gives its slot back";
}

TEST_F(IdentityServerTest, ConnectionsThatSayNothingHoldNoSlotPastTheHelloDeadline) {
  // Four silent connections take every slot of this uid, until the deadline (300 ms here).
  std::vector<std::unique_ptr<Client>> silent;
  for (int i = 0; i < 4; ++i) silent.push_back(std::make_unique<Client>(server_->socket_path()));
  const absl::Time started = absl::Now();
  for (auto& client : silent) EXPECT_EQ(client->WaitForClose(absl::Seconds(5)), "closed");
  EXPECT_GE(absl::Now() - started, absl::Milliseconds(250));
  Client talker(server_->socket_path());
  EXPECT_EQ(talker.Ask("HELLO 1").rfind("OK ", 0), 0u);
  // One that said HELLO stays past the deadline.
  absl::SleepFor(absl::Milliseconds(500));
  EXPECT_EQ(talker.Ask("HELLO 1").rfind("OK ", 0), 0u);
}

TEST_F(IdentityServerTest, GarbageAndOversizedPacketsAreRefusedWithoutHarm) {
  Client client(server_->socket_path());
  EXPECT_EQ(client.Ask(std::string(8000, 'A')).rfind("ERR ", 0), 0u);
  EXPECT_EQ(client.Ask(std::string("\0\x01\x1b", 3)).rfind("ERR ", 0), 0u);
  EXPECT_EQ(client.Ask("HELLO 1").rfind("OK ", 0), 0u);
}

TEST_F(IdentityServerTest, StopRemovesTheSocketAndEndsTokens) {
  Client client(server_->socket_path());
  const std::string token = client.Ask("HELLO 1").substr(3);
  server_->Stop();
  EXPECT_FALSE(callers_.Find(token).ok());
  struct stat info {};
  EXPECT_NE(::lstat(server_->socket_path().c_str(), &info), 0);
}

}  // namespace
}  // namespace ddo
