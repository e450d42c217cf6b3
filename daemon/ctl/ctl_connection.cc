#include "daemon/ctl/ctl_connection.h"

#include <grpcpp/client_context.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <sys/stat.h>

#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ddo/wire/daemon_address.h"
#include "ddo/wire/daemon_checks.h"
#include "ddo/wire/identity_protocol.h"
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
  const std::set<uid_t> trusted = TrustedDaemonUidsFromEnvironment();
  for (const std::string& target : targets.targets) {
    // Who could have put the socket there, or who holds the port, is checked before a byte is
    // sent, the health check included (issue 31): an impostor learns nothing of this user.
    const std::string path = UnixSocketPath(target);
    if (!path.empty()) {
      if (absl::Status own = CheckPerUserDirectoryOf(path); !own.ok()) return own;
      struct stat info {};
      if (::lstat(path.c_str(), &info) != 0) {
        attempts.push_back(absl::StrCat(target, " (no socket file)"));
        continue;
      }
      if (absl::Status placed = CheckSocketLocation(path, trusted); !placed.ok()) return placed;
    } else {
      if (TcpListenerOwners(TcpPort(target)).empty()) {
        attempts.push_back(absl::StrCat(target, " (nothing listens on port ",
                                        TcpPort(target), ")"));
        continue;
      }
      // The identity socket proves only who serves *it*: the port must be held by a trusted
      // user too, or an impostor on the port would receive the token.
      if (absl::Status held = CheckTcpListener(target, TcpPort(target), trusted); !held.ok()) {
        return held;
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
    // Who we are: ddod names its identity socket in GetInfo, which needs no token; a Unix
    // socket's identity socket is beside it.
    std::string identity_path;
    if (!path.empty()) {
      identity_path = IdentitySocketPath(path);
    } else {
      grpc::ClientContext info_context;
      info_context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
      ddo::v1::DaemonInfo info;
      auto stub = ddo::v1::Ddo::NewStub(channel);
      if (grpc::Status got = stub->GetInfo(&info_context, ddo::v1::GetInfoRequest(), &info);
          !got.ok()) {
        attempts.push_back(absl::StrCat(target, " (GetInfo: ", got.error_message(), ")"));
        continue;
      }
      identity_path = info.identity_socket();
    }
    absl::StatusOr<IdentityLink> identity = IdentityLink::Connect(identity_path, trusted);
    if (!identity.ok()) {
      if (absl::IsPermissionDenied(identity.status())) return identity.status();
      attempts.push_back(absl::StrCat(target, " (", identity.status().message(), ")"));
      continue;
    }
    CtlConnection connection;
    connection.identity_ = std::make_shared<IdentityLink>(*std::move(identity));
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

void CtlConnection::Prepare(grpc::ClientContext* context) const {
  context->set_deadline(absl::ToChronoTime(absl::Now() + timeout_));
  if (identity_ != nullptr) context->AddMetadata("ddo-token", identity_->token());
}

}  // namespace ddo
