#include "daemon/server/daemon_server.h"

#include <grpcpp/client_context.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <grp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <filesystem>
#include <optional>
#include <thread>

#include "daemon/common/temp_dir_for_test.h"
#include "daemon/config/environment.h"
#include "ddo/wire/identity_client.h"
#include "gmock/gmock.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "gtest/gtest.h"

namespace ddo {
namespace {

using ::grpc::health::v1::HealthCheckResponse;
using ::testing::HasSubstr;

class DaemonServerTest : public ::testing::Test {
 protected:
  DaemonOptions Options() {
    UserContext user;
    user.uid = ::getuid();
    user.home = dir_.path();
    auto options = ResolveDaemonOptions(
        {"--socket", socket_path(), "--state-dir", dir_.Join("state"), "--log-level", "warn"},
        Environment{}, user);
    EXPECT_TRUE(options.ok()) << options.status();
    return *options;
  }

  std::string socket_path() const { return dir_.Join("run/ddod.sock"); }

  std::shared_ptr<grpc::Channel> Channel() const {
    return grpc::CreateChannel("unix:" + socket_path(), grpc::InsecureChannelCredentials());
  }

  // A call context with a deadline, carrying this test's token once Identify() ran.
  std::unique_ptr<grpc::ClientContext> Deadline() const {
    auto context = std::make_unique<grpc::ClientContext>();
    context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    if (link_.has_value()) context->AddMetadata("ddo-token", link_->token());
    return context;
  }

  // Proves who this test is on the daemon's identity socket, as every client does.
  void Identify() {
    auto link = IdentityLink::Connect(socket_path() + ".id", TrustedDaemonUids(""));
    ASSERT_TRUE(link.ok()) << link.status();
    link_.emplace(*std::move(link));
  }

  HealthCheckResponse::ServingStatus Health(const std::string& service) const {
    auto stub = grpc::health::v1::Health::NewStub(Channel());
    grpc::health::v1::HealthCheckRequest request;
    request.set_service(service);
    HealthCheckResponse response;
    grpc::Status status = stub->Check(Deadline().get(), request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return response.status();
  }

  TempDirForTest dir_;
  std::optional<IdentityLink> link_;
};

TEST_F(DaemonServerTest, ServesInfoAndHealthOnAnOwnerOnlySocket) {
  auto server = DaemonServer::Start(Options());
  ASSERT_TRUE(server.ok()) << server.status();

  struct stat info {};
  ASSERT_EQ(::stat(socket_path().c_str(), &info), 0);
  EXPECT_TRUE(S_ISSOCK(info.st_mode));
  EXPECT_EQ(info.st_mode & 0777, 0600u);

  EXPECT_EQ(Health(""), HealthCheckResponse::SERVING);
  EXPECT_EQ(Health("ddo.v1.Ddo"), HealthCheckResponse::SERVING);

  auto stub = ddo::v1::Ddo::NewStub(Channel());
  ddo::v1::DaemonInfo daemon;
  grpc::Status status = stub->GetInfo(Deadline().get(), ddo::v1::GetInfoRequest(), &daemon);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(daemon.api_version(), "ddo.v1");
  EXPECT_EQ(daemon.pid(), ::getpid());
  EXPECT_EQ(daemon.effective_preset(), "one_shot_fast");
  EXPECT_FALSE(daemon.backend_detail().empty());
  EXPECT_GT(daemon.platform().ram_total_bytes(), 0u);
  EXPECT_THAT(daemon.listen_addresses(), ::testing::Contains("unix:" + socket_path()));
  EXPECT_FALSE(daemon.embedded());
  if (daemon.backend() == ddo::v1::BACKEND_HOST) {
    EXPECT_EQ(daemon.devices_size(), 0);
    return;
  }
  // On a GPU machine: every device by UUID, and its pinned bandwidth measured soon after start.
  ASSERT_GT(daemon.devices_size(), 0);
  for (int attempt = 0; attempt < 200 && daemon.devices(0).h2d_gbps() == 0; ++attempt) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ASSERT_TRUE(stub->GetInfo(Deadline().get(), ddo::v1::GetInfoRequest(), &daemon).ok());
  }
  EXPECT_GT(daemon.devices(0).h2d_gbps(), 1.0);
  EXPECT_THAT(daemon.devices(0).uuid(), ::testing::StartsWith("GPU-"));
}

TEST_F(DaemonServerTest, AFailedCallIsNamedCountedAndHarmless) {
  auto server = DaemonServer::Start(Options());
  ASSERT_TRUE(server.ok());
  Identify();
  auto stub = ddo::v1::Ddo::NewStub(Channel());
  ddo::v1::Profile response;
  ddo::v1::GetProfileRequest request;
  request.mutable_ref()->set_key("../not-a-key");
  grpc::Status status = stub->GetProfile(Deadline().get(), request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("../not-a-key"));
  // And the daemon keeps serving.
  ddo::v1::Stats stats;
  ASSERT_TRUE(stub->GetStats(Deadline().get(), ddo::v1::GetStatsRequest(), &stats).ok());
  bool counted = false;
  for (const auto& rpc : stats.rpcs()) {
    if (rpc.method() == "GetProfile") counted = rpc.failed() == 1;
  }
  EXPECT_TRUE(counted);
}

TEST_F(DaemonServerTest, ASecondDaemonOnTheSameSocketIsRefused) {
  auto first = DaemonServer::Start(Options());
  ASSERT_TRUE(first.ok());
  auto second = DaemonServer::Start(Options());
  ASSERT_FALSE(second.ok());
  EXPECT_TRUE(absl::IsAlreadyExists(second.status()));
  EXPECT_THAT(std::string(second.status().message()), HasSubstr(socket_path()));
  // The first one was not disturbed.
  EXPECT_EQ(Health(""), HealthCheckResponse::SERVING);
}

TEST_F(DaemonServerTest, AStaleSocketFileIsReplaced) {
  std::filesystem::create_directories(dir_.Join("run"));
  // A socket file with nobody behind it, as a SIGKILLed daemon leaves.
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::snprintf(address.sun_path, sizeof(address.sun_path), "%s", socket_path().c_str());
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  ::close(fd);
  ASSERT_TRUE(std::filesystem::exists(socket_path()));

  auto server = DaemonServer::Start(Options());
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_EQ(Health(""), HealthCheckResponse::SERVING);
}

TEST_F(DaemonServerTest, ARegularFileInPlaceOfTheSocketIsLeftAlone) {
  std::filesystem::create_directories(dir_.Join("run"));
  FILE* file = std::fopen(socket_path().c_str(), "w");
  ASSERT_NE(file, nullptr);
  std::fclose(file);
  auto server = DaemonServer::Start(Options());
  ASSERT_FALSE(server.ok());
  EXPECT_THAT(std::string(server.status().message()), HasSubstr("not a socket"));
  EXPECT_TRUE(std::filesystem::is_regular_file(socket_path()));
}

TEST_F(DaemonServerTest, ShutdownTellsLeasesRefusesWorkAndRemovesTheSocket) {
  auto server = DaemonServer::Start(Options());
  ASSERT_TRUE(server.ok());
  Identify();
  auto stub = ddo::v1::Ddo::NewStub(Channel());

  grpc::ClientContext lease_context;
  lease_context.AddMetadata("ddo-token", link_->token());
  ddo::v1::ConnectRequest hello;
  hello.set_client_pid(::getpid());
  hello.set_client_name("daemon_server_test");
  auto stream = stub->Connect(&lease_context, hello);
  ddo::v1::ConnectEvent event;
  ASSERT_TRUE(stream->Read(&event));
  ASSERT_TRUE(event.has_connected());
  EXPECT_EQ(event.connected().lease_id().size(), 32u);
  EXPECT_EQ(event.connected().daemon().pid(), ::getpid());
  EXPECT_EQ((*server)->service().leases().size(), 1u);

  // The service refuses new work as soon as shutdown begins, before gRPC stops listening.
  std::thread stopper([&] { (*server)->Shutdown("test"); });
  ASSERT_TRUE(stream->Read(&event));
  EXPECT_TRUE(event.has_shutting_down());
  EXPECT_EQ(event.shutting_down().reason(), "test");
  EXPECT_FALSE(stream->Read(&event));
  EXPECT_TRUE(stream->Finish().ok());
  stopper.join();

  EXPECT_EQ((*server)->service().leases().size(), 0u);
  EXPECT_FALSE(std::filesystem::exists(socket_path()));
  EXPECT_FALSE(std::filesystem::exists(socket_path() + ".lock"));
  ddo::v1::DaemonInfo info;
  grpc::Status after = stub->GetInfo(Deadline().get(), ddo::v1::GetInfoRequest(), &info);
  EXPECT_EQ(after.error_code(), grpc::StatusCode::UNAVAILABLE);
}

TEST_F(DaemonServerTest, ALeaseEndsWhenItsClientGoesAway) {
  auto server = DaemonServer::Start(Options());
  ASSERT_TRUE(server.ok());
  Identify();
  auto stub = ddo::v1::Ddo::NewStub(Channel());
  {
    grpc::ClientContext lease_context;
    lease_context.AddMetadata("ddo-token", link_->token());
    auto stream = stub->Connect(&lease_context, ddo::v1::ConnectRequest());
    ddo::v1::ConnectEvent event;
    ASSERT_TRUE(stream->Read(&event));
    EXPECT_EQ((*server)->service().leases().size(), 1u);
    lease_context.TryCancel();
  }
  for (int i = 0; i < 100 && (*server)->service().leases().size() != 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ((*server)->service().leases().size(), 0u);
}

TEST_F(DaemonServerTest, RequestsAreRefusedWhileShuttingDown) {
  // The window between BeginShutdown and gRPC's own Shutdown, made observable.
  DaemonContext context;
  context.options = Options();
  HostPool pool(PoolOptions{});
  SessionRegistry sessions;
  ComponentStore store(pool, sessions, StoreOptions{});
  StreamSessions streams(store, sessions, pool, context.gpus, StreamSessionsOptions{});
  CallerRegistry callers;
  DdoService service(context, pool, sessions, store, streams, callers);
  service.BeginShutdown("test");
  ddo::v1::DaemonInfo info;
  grpc::ServerContext server_context;
  EXPECT_EQ(service.GetInfo(&server_context, nullptr, &info).error_code(),
            grpc::StatusCode::UNAVAILABLE);
  ddo::v1::AbortUploadResponse response;
  EXPECT_EQ(service.AbortUpload(&server_context, nullptr, &response).error_code(),
            grpc::StatusCode::UNAVAILABLE);
}

TEST_F(DaemonServerTest, EveryCallButGetInfoNeedsAToken) {
  auto server = DaemonServer::Start(Options());
  ASSERT_TRUE(server.ok());
  auto stub = ddo::v1::Ddo::NewStub(Channel());
  ddo::v1::DaemonInfo info;
  ASSERT_TRUE(stub->GetInfo(Deadline().get(), ddo::v1::GetInfoRequest(), &info).ok());
  EXPECT_EQ(info.identity_socket(), socket_path() + ".id");
  EXPECT_EQ(info.uid(), static_cast<int64_t>(::geteuid()));
  ddo::v1::Stats stats;
  grpc::Status anonymous = stub->GetStats(Deadline().get(), ddo::v1::GetStatsRequest(), &stats);
  EXPECT_EQ(anonymous.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_THAT(anonymous.error_message(), HasSubstr("identity socket"));
  auto forged = Deadline();
  forged->AddMetadata("ddo-token", "00000000000000000000000000000000");
  EXPECT_EQ(stub->GetStats(forged.get(), ddo::v1::GetStatsRequest(), &stats).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  Identify();
  EXPECT_TRUE(stub->GetStats(Deadline().get(), ddo::v1::GetStatsRequest(), &stats).ok());
  // The lease carries the pid the kernel saw, not the one the request claims.
  grpc::ClientContext lease_context;
  lease_context.AddMetadata("ddo-token", link_->token());
  ddo::v1::ConnectRequest hello;
  hello.set_client_pid(1);
  auto stream = stub->Connect(&lease_context, hello);
  ddo::v1::ConnectEvent event;
  ASSERT_TRUE(stream->Read(&event));
  ASSERT_EQ((*server)->service().leases().List().size(), 1u);
  EXPECT_EQ((*server)->service().leases().List()[0].client_pid, ::getpid());
  lease_context.TryCancel();
}

TEST_F(DaemonServerTest, SocketGroupLeavesADirectoryItDidNotCreateAlone) {
  // A directory that exists already (as /run does) keeps its owner group and mode.
  std::filesystem::create_directories(dir_.Join("run"));
  ASSERT_EQ(::chmod(dir_.Join("run").c_str(), 0700), 0);
  DaemonOptions options = Options();
  const group* any = ::getgrgid(::getegid());
  ASSERT_NE(any, nullptr);
  options.socket_group = any->gr_name;
  auto server = DaemonServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  struct stat info {};
  ASSERT_EQ(::stat(dir_.Join("run").c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0700u);
  ASSERT_EQ(::stat(socket_path().c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0660u);
  ASSERT_EQ(::stat((socket_path() + ".id").c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0660u);
}

}  // namespace
}  // namespace ddo
