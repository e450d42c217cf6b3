// ConnectToDaemon against the scenario table shared with ddoctl's command line and the Python
// client (tests/connect_scenarios.json): real sockets and files, a fake ddod (an in-process
// grpc::Server answering Health and GetInfo) and the daemon's real identity server.
#include "ddo/wire/connect_to_daemon.h"

#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "daemon/common/temp_dir_for_test.h"
#include "daemon/identity/identity_server.h"
#include "ddo/v1/ddo.grpc.pb.h"
#include "ddo/wire/daemon_checks.h"
#include "ddo/wire/identity_protocol.h"
#include "ddo/wire/unique_fd.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace ddo {
namespace {

using grpc::health::v1::HealthCheckResponse;
using nlohmann::json;

class FakeHealth final : public grpc::health::v1::Health::Service {
 public:
  explicit FakeHealth(HealthCheckResponse::ServingStatus status) : status_(status) {}
  grpc::Status Check(grpc::ServerContext*, const grpc::health::v1::HealthCheckRequest*,
                     HealthCheckResponse* response) override {
    response->set_status(status_);
    return grpc::Status::OK;
  }

 private:
  HealthCheckResponse::ServingStatus status_;
};

class FakeInfo final : public ddo::v1::Ddo::Service {
 public:
  explicit FakeInfo(std::string identity_socket) : identity_socket_(std::move(identity_socket)) {}
  grpc::Status GetInfo(grpc::ServerContext*, const ddo::v1::GetInfoRequest*,
                       ddo::v1::DaemonInfo* info) override {
    info->set_identity_socket(identity_socket_);
    return grpc::Status::OK;
  }

 private:
  std::string identity_socket_;
};

// A listening Unix socket at `path` that nobody answers: a socket file and nothing more.
UniqueFd BoundSocket(const std::string& path) {
  UniqueFd fd(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::strncpy(address.sun_path, path.c_str(), sizeof(address.sun_path) - 1);
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) return {};
  ::listen(fd.get(), 1);
  return fd;
}

// One row's daemon address and whatever serves it.
class Scene {
 public:
  // False (with `*skip` saying why) when this process cannot set the row up.
  bool Build(const json& row, std::string* skip) {
    const std::string directory = dir_.Join("d");
    ::mkdir(directory.c_str(), 0700);
    const std::string kind = row.value("directory", "private");
    if (kind == "world_writable") ::chmod(directory.c_str(), 0777);
    if (kind == "other_user") {
      if (::geteuid() != 0) {
        *skip = "needs root to give a directory to another user";
        return false;
      }
      ::chmod(directory.c_str(), 0755);
      if (::chown(directory.c_str(), 4242, 4242) != 0) return false;
    }
    const std::string socket = directory + "/ddod.sock";
    const std::string socket_kind = row.value("socket", "daemon");
    if (row["transport"] == "unix") {
      target_ = "unix:" + socket;
      if (socket_kind == "file") std::ofstream(socket) << "not a socket";
      if (socket_kind != "daemon") return true;
    }
    return StartDaemon(row, socket);
  }
  const std::string& target() const { return target_; }

 private:
  bool StartDaemon(const json& row, const std::string& socket) {
    health_ = std::make_unique<FakeHealth>(row["health"] == "SERVING"
                                               ? HealthCheckResponse::SERVING
                                               : HealthCheckResponse::NOT_SERVING);
    std::string identity_socket = IdentitySocketPath(socket);
    if (row["identity"] == "world_writable") {
      const std::string open_directory = dir_.Join("open");
      ::mkdir(open_directory.c_str(), 0777);
      ::chmod(open_directory.c_str(), 0777);
      identity_socket = open_directory + "/ddod.sock.id";
      squatter_ = BoundSocket(identity_socket);
    }
    info_ = std::make_unique<FakeInfo>(identity_socket);
    grpc::ServerBuilder builder;
    int port = 0;
    if (row["transport"] == "unix") {
      builder.AddListeningPort("unix:" + socket, grpc::InsecureServerCredentials());
    } else {
      builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    }
    builder.RegisterService(health_.get());
    builder.RegisterService(info_.get());
    server_ = builder.BuildAndStart();
    if (server_ == nullptr) return false;
    if (row["transport"] == "tcp") target_ = absl::StrCat("127.0.0.1:", port);
    if (row["identity"] != "beside") return true;
    IdentityServerOptions options;
    options.socket_path = identity_socket;
    auto identity = IdentityServer::Start(options, callers_);
    if (!identity.ok()) return false;
    identity_ = *std::move(identity);
    return true;
  }

  TempDirForTest dir_;
  std::string target_;
  std::unique_ptr<FakeHealth> health_;
  std::unique_ptr<FakeInfo> info_;
  std::unique_ptr<grpc::Server> server_;
  CallerRegistry callers_;
  std::unique_ptr<IdentityServer> identity_;
  UniqueFd squatter_;
};

json LoadScenarios() {
  std::ifstream file(DDO_CONNECT_SCENARIOS);
  return json::parse(file)["scenarios"];
}

TEST(ConnectToDaemonTest, EveryScenarioOfTheTable) {
  const json scenarios = LoadScenarios();
  ASSERT_GE(scenarios.size(), 7u);
  for (const json& row : scenarios) {
    const std::string name = row["name"];
    SCOPED_TRACE(name);
    Scene scene;
    std::string skip;
    if (!scene.Build(row, &skip)) {
      ASSERT_FALSE(skip.empty()) << "cannot set up " << name;
      std::printf("[ SKIPPED  ] %s: %s\n", name.c_str(), skip.c_str());
      continue;
    }
    DaemonTargets targets;
    targets.targets = {scene.target()};
    targets.fixed = true;
    DaemonConnectOptions options;
    options.trusted = TrustedDaemonUids("");
    absl::StatusOr<DaemonConnection> connection = ConnectToDaemon(targets, options);
    const std::string outcome = row["expect"]["outcome"];
    if (outcome == "ok") {
      ASSERT_TRUE(connection.ok()) << connection.status();
      EXPECT_EQ(connection->target, scene.target());
      EXPECT_EQ(connection->identity->token().size(), 32u);
      continue;
    }
    ASSERT_FALSE(connection.ok());
    if (outcome == "unavailable") {
      EXPECT_TRUE(NoDaemonAnswered(connection.status())) << connection.status();
    } else {
      ASSERT_EQ(outcome, "untrusted");
      EXPECT_TRUE(absl::IsPermissionDenied(connection.status())) << connection.status();
    }
    EXPECT_NE(connection.status().message().find(row["expect"]["phrase"].get<std::string>()),
              std::string::npos)
        << connection.status();
  }
}

TEST(ConnectToDaemonTest, TheFirstTargetThatAnswersIsTakenAndTheOthersAreListed) {
  const json scenarios = LoadScenarios();
  Scene missing;
  Scene good;
  std::string skip;
  ASSERT_TRUE(missing.Build(scenarios[0], &skip));
  ASSERT_TRUE(good.Build(scenarios.back(), &skip));
  DaemonTargets targets;
  targets.targets = {missing.target(), good.target()};
  DaemonConnectOptions options;
  options.trusted = TrustedDaemonUids("");
  absl::StatusOr<DaemonConnection> connection = ConnectToDaemon(targets, options);
  ASSERT_TRUE(connection.ok()) << connection.status();
  EXPECT_EQ(connection->target, good.target());

  targets.targets = {missing.target(), missing.target()};
  connection = ConnectToDaemon(targets, options);
  ASSERT_TRUE(NoDaemonAnswered(connection.status())) << connection.status();
  EXPECT_EQ(connection.status().message(),
            absl::StrCat("no ddod answered at ", missing.target(), " (no socket file); ",
                         missing.target(), " (no socket file)"));
}

}  // namespace
}  // namespace ddo
