#include "daemon/ctl/ctl_connection.h"

#include <grpcpp/client_context.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <sys/stat.h>

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "grpc/health/v1/health.grpc.pb.h"

namespace ddo {
namespace {

using grpc::health::v1::HealthCheckResponse;

// As large as ddod's own limit (server/daemon_server.cc).
constexpr int kMaxMessageBytes = 64 << 20;

std::string HealthName(HealthCheckResponse::ServingStatus status) {
  return HealthCheckResponse::ServingStatus_Name(status);
}

}  // namespace

absl::StatusOr<CtlConnection> CtlConnection::Open(const DaemonTargets& targets,
                                                  absl::Duration timeout) {
  std::vector<std::string> attempts;
  for (const std::string& target : targets.targets) {
    if (const std::string path = UnixSocketPath(target); !path.empty()) {
      struct stat info {};
      if (::stat(path.c_str(), &info) != 0) {
        attempts.push_back(absl::StrCat(target, " (no socket file)"));
        continue;
      }
    }
    grpc::ChannelArguments arguments;
    arguments.SetMaxReceiveMessageSize(kMaxMessageBytes);
    auto channel =
        grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), arguments);
    auto health = grpc::health::v1::Health::NewStub(channel);
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
    grpc::health::v1::HealthCheckRequest request;
    HealthCheckResponse response;
    grpc::Status status = health->Check(&context, request, &response);
    if (!status.ok()) {
      attempts.push_back(absl::StrCat(target, " (", status.error_message(), ")"));
      continue;
    }
    CtlConnection connection;
    connection.target_ = target;
    connection.health_ = HealthName(response.status());
    connection.timeout_ = timeout;
    connection.channel_ = channel;
    connection.stub_ = ddo::v1::Ddo::NewStub(channel);
    return connection;
  }
  return absl::UnavailableError(absl::StrCat(
      "no ddod answered at ", absl::StrJoin(attempts, ", "),
      ".\nStart one with `ddod --preset warm_process`, or point DDO_DAEMON (or --daemon) at "
      "a running daemon."));
}

}  // namespace ddo
