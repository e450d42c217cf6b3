#include "daemon/server/connection_gate.h"

#include <poll.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "daemon/common/temp_dir_for_test.h"
#include "daemon/server/tcp_listener.h"
#include "ddo/wire/unique_fd.h"
#include "gtest/gtest.h"

namespace ddo {
namespace {

UniqueFd Listen(const std::string& path) {
  UniqueFd listener(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::strncpy(address.sun_path, path.c_str(), sizeof(address.sun_path) - 1);
  EXPECT_EQ(::bind(listener.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  EXPECT_EQ(::listen(listener.get(), 64), 0);
  return listener;
}

UniqueFd Connect(const std::string& path) {
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::strncpy(address.sun_path, path.c_str(), sizeof(address.sun_path) - 1);
  EXPECT_EQ(::connect(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  return fd;
}

// Whether the gate closed the client's end `fd` within `limit` (it writes nothing otherwise).
bool ClosedWithin(int fd, absl::Duration limit) {
  pollfd polled = {fd, POLLIN, 0};
  if (::poll(&polled, 1, static_cast<int>(absl::ToInt64Milliseconds(limit))) <= 0) return false;
  char byte;
  return ::recv(fd, &byte, 1, MSG_DONTWAIT) == 0;
}

// Stands in for the gRPC server: keeps what it is handed, closes it on request.
class Holder {
  struct Wanted {
    const std::vector<UniqueFd>* held;
    size_t count;
    static bool Met(Wanted* wanted) { return wanted->held->size() >= wanted->count; }
  };

 public:
  void Take(int fd) {
    absl::MutexLock lock(&mu_);
    held_.emplace_back(fd);
  }
  size_t WaitFor(size_t count) {
    absl::MutexLock lock(&mu_);
    Wanted wanted{&held_, count};
    mu_.AwaitWithTimeout(absl::Condition(&Wanted::Met, &wanted), absl::Seconds(5));
    return held_.size();
  }
  size_t size() {
    absl::MutexLock lock(&mu_);
    return held_.size();
  }
  void CloseFirst() {
    absl::MutexLock lock(&mu_);
    held_.erase(held_.begin());
  }

 private:
  absl::Mutex mu_;
  std::vector<UniqueFd> held_;
};

class ConnectionGateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = dir_.Join("gate.sock");
    ConnectionGateOptions options;
    options.limits.per_uid = 3;
    options.descriptor_reserve = 16;
    auto gate = ConnectionGate::Start(Listen(path_), options,
                                      [this](int fd) { holder_.Take(fd); });
    ASSERT_TRUE(gate.ok()) << gate.status();
    gate_ = *std::move(gate);
  }

  TempDirForTest dir_;
  std::string path_;
  Holder holder_;
  std::unique_ptr<ConnectionGate> gate_;
};

TEST_F(ConnectionGateTest, AUidPastItsLimitIsClosedAtOnceAndTheRestAreHandedOver) {
  std::vector<UniqueFd> clients;
  for (int i = 0; i < 3; ++i) clients.push_back(Connect(path_));
  UniqueFd fourth = Connect(path_);
  EXPECT_TRUE(ClosedWithin(fourth.get(), absl::Seconds(5)));
  EXPECT_EQ(holder_.size(), 3u);
  for (const UniqueFd& client : clients) EXPECT_FALSE(ClosedWithin(client.get(), absl::ZeroDuration()));
}

TEST_F(ConnectionGateTest, AConnectionItsOwnerClosedGivesItsSlotBack) {
  std::vector<UniqueFd> clients;
  for (int i = 0; i < 3; ++i) clients.push_back(Connect(path_));
  ASSERT_EQ(holder_.WaitFor(3), 3u);
  holder_.CloseFirst();  // as gRPC does when a client goes: the gate is not told
  UniqueFd next = Connect(path_);
  EXPECT_EQ(holder_.WaitFor(3), 3u);
  EXPECT_FALSE(ClosedWithin(next.get(), absl::Milliseconds(200)));
  UniqueFd over = Connect(path_);
  EXPECT_TRUE(ClosedWithin(over.get(), absl::Seconds(5)));
}

TEST_F(ConnectionGateTest, StopClosesTheListener) {
  gate_->Stop();
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::strncpy(address.sun_path, path_.c_str(), sizeof(address.sun_path) - 1);
  EXPECT_NE(::connect(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
}

UniqueFd ConnectTcp(int port) {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  return fd;
}

// --listen's port: the kernel names no uid there, so every peer shares the total.
TEST(ConnectionGateTcpTest, TcpPeersShareTheTotalAndThePortIsTheOneBound) {
  EXPECT_TRUE(absl::IsInvalidArgument(ListenOnTcp("no-port").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(ListenOnTcp("127.0.0.1:99999").status()));
  absl::StatusOr<TcpListener> listener = ListenOnTcp("127.0.0.1:0");
  ASSERT_TRUE(listener.ok()) << listener.status();
  ASSERT_GT(listener->port, 0);
  const int port = listener->port;
  Holder holder;
  ConnectionGateOptions options;
  options.what = "TCP port";
  options.tcp = true;
  options.limits.per_uid = 1;  // not what bounds TCP peers: the total does
  options.limits.in_all = 3;
  options.descriptor_reserve = 16;
  auto gate = ConnectionGate::Start(std::move(listener->fd), options,
                                    [&holder](int fd) { holder.Take(fd); });
  ASSERT_TRUE(gate.ok()) << gate.status();
  std::vector<UniqueFd> clients;
  for (int i = 0; i < 3; ++i) clients.push_back(ConnectTcp(port));
  EXPECT_EQ(holder.WaitFor(3), 3u);
  UniqueFd over = ConnectTcp(port);
  EXPECT_TRUE(ClosedWithin(over.get(), absl::Seconds(5)));
  for (const UniqueFd& client : clients) {
    EXPECT_FALSE(ClosedWithin(client.get(), absl::ZeroDuration()));
  }
  (*gate)->Stop();
}

}  // namespace
}  // namespace ddo
