// The sequence of connect_to_daemon.h, one step per function.
#include "ddo/wire/connect_to_daemon.h"

#include <grpcpp/client_context.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/channel_arguments.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ddo/v1/ddo.grpc.pb.h"
#include "ddo/wire/daemon_checks.h"
#include "ddo/wire/identity_protocol.h"
#include "grpc/health/v1/health.grpc.pb.h"

namespace ddo {
namespace {

using grpc::health::v1::HealthCheckResponse;

// As large as ddod's own limit (daemon/server/daemon_server.cc).
constexpr int kMaxMessageBytes = 64 << 20;

// Marks the error of "no target answered" (NoDaemonAnswered).
constexpr char kNoDaemonAnsweredPayload[] = "ddo.wire/no-daemon-answered";

absl::Status FromGrpc(const grpc::Status& status, const std::string& call) {
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      absl::StrCat(call, status.error_message()));
}

// Why nothing can listen at `path`; "" when a socket file is there.
std::string SocketFileProblem(const std::string& path) {
  struct stat info {};
  if (::lstat(path.c_str(), &info) != 0) {
    return errno == ENOENT ? "no socket file"
                           : absl::StrCat("cannot stat the socket: ", std::strerror(errno));
  }
  return S_ISSOCK(info.st_mode) ? "" : "not a socket";
}

// Step 1. PERMISSION_DENIED for a location another user could have made; otherwise `*why`
// says why nothing can answer at `target` ("" when something may).
absl::Status CheckLocation(const std::string& target, const std::set<uid_t>& trusted,
                           std::string* why) {
  if (const std::string path = UnixSocketPath(target); !path.empty()) {
    // A squatted /tmp/ddo-<uid> is refused even when it holds no socket (yet).
    if (absl::Status own = CheckPerUserDirectoryOf(path); !own.ok()) return own;
    *why = SocketFileProblem(path);
    if (!why->empty()) return absl::OkStatus();
    return CheckSocketLocation(path, trusted);
  }
  const int port = TcpPort(target);
  if (TcpListenerOwners(port).empty()) {
    *why = absl::StrCat("nothing listens on port ", port);
    return absl::OkStatus();
  }
  // The identity socket proves only who serves *it*: the port must be held by a trusted user
  // too, or an impostor on the port would receive the token.
  return CheckTcpListener(target, port, trusted);
}

// Step 2. "" when the daemon answers SERVING; else why not, for the attempt list.
std::string HealthProblem(const std::shared_ptr<grpc::Channel>& channel,
                          absl::Duration timeout) {
  auto stub = grpc::health::v1::Health::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  HealthCheckResponse response;
  const grpc::Status status =
      stub->Check(&context, grpc::health::v1::HealthCheckRequest(), &response);
  if (!status.ok()) {
    return absl::StrCat(
        absl::StatusCodeToString(static_cast<absl::StatusCode>(status.error_code())), ": ",
        status.error_message());
  }
  if (response.status() != HealthCheckResponse::SERVING) {
    return absl::StrCat("health ", HealthCheckResponse::ServingStatus_Name(response.status()));
  }
  return "";
}

// Step 3: where the daemon at `target` has its identity socket, checked like its own socket.
absl::StatusOr<std::string> IdentitySocketOf(const std::string& target,
                                             const std::shared_ptr<grpc::Channel>& channel,
                                             const DaemonConnectOptions& options) {
  std::string path;
  if (const std::string socket = UnixSocketPath(target); !socket.empty()) {
    path = IdentitySocketPath(socket);
  } else {
    // Again, right before the identity socket the port's holder names is used.
    if (absl::Status held = CheckTcpListener(target, TcpPort(target), options.trusted);
        !held.ok()) {
      return held;
    }
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + options.call_timeout));
    ddo::v1::DaemonInfo info;
    const grpc::Status got =
        ddo::v1::Ddo::NewStub(channel)->GetInfo(&context, ddo::v1::GetInfoRequest(), &info);
    if (!got.ok()) return FromGrpc(got, "GetInfo: ");
    if (info.identity_socket().empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "ddod at ", target, " names no identity socket in GetInfo: it is older than this "
          "client (update ddod)"));
    }
    path = info.identity_socket();
  }
  struct stat info {};
  if (::lstat(path.c_str(), &info) != 0) {
    return absl::UnavailableError(absl::StrCat(
        "cannot connect to ddod's identity socket ", path, ": ", std::strerror(errno),
        " (is ddod older than this client?)"));
  }
  if (absl::Status placed = CheckSocketLocation(path, options.trusted); !placed.ok()) {
    return placed;
  }
  return path;
}

// Steps 3 and 4 on a daemon that answered SERVING.
absl::StatusOr<DaemonConnection> Trust(const std::string& target,
                                       std::shared_ptr<grpc::Channel> channel,
                                       const DaemonConnectOptions& options) {
  absl::StatusOr<std::string> identity_path = IdentitySocketOf(target, channel, options);
  if (!identity_path.ok()) return identity_path.status();
  const int timeout_ms = static_cast<int>(
      std::clamp<int64_t>(absl::ToInt64Milliseconds(options.call_timeout), 1, 3'600'000));
  absl::StatusOr<IdentityLink> identity =
      IdentityLink::Connect(*identity_path, options.trusted, timeout_ms);
  if (!identity.ok()) return identity.status();
  DaemonConnection connection;
  connection.target = target;
  connection.channel = std::move(channel);
  connection.identity = std::make_unique<IdentityLink>(*std::move(identity));
  return connection;
}

}  // namespace

absl::StatusOr<DaemonConnection> ConnectToDaemon(const DaemonTargets& targets,
                                                 const DaemonConnectOptions& options) {
  std::vector<std::string> attempts;
  for (const std::string& target : targets.targets) {
    std::string why;
    if (absl::Status placed = CheckLocation(target, options.trusted, &why); !placed.ok()) {
      return placed;
    }
    if (why.empty()) {
      std::shared_ptr<grpc::Channel> channel = MakeDaemonChannel(target);
      why = HealthProblem(channel, options.health_timeout);
      if (why.empty()) return Trust(target, std::move(channel), options);
    }
    attempts.push_back(absl::StrCat(target, " (", why, ")"));
  }
  absl::Status none = absl::UnavailableError(absl::StrCat(
      "no ddod answered at ", attempts.empty() ? "no address" : absl::StrJoin(attempts, "; ")));
  none.SetPayload(kNoDaemonAnsweredPayload, absl::Cord());
  return none;
}

bool NoDaemonAnswered(const absl::Status& status) {
  return absl::IsUnavailable(status) && status.GetPayload(kNoDaemonAnsweredPayload).has_value();
}

std::shared_ptr<grpc::Channel> MakeDaemonChannel(const std::string& target) {
  grpc::ChannelArguments arguments;
  arguments.SetMaxReceiveMessageSize(kMaxMessageBytes);
  arguments.SetMaxSendMessageSize(kMaxMessageBytes);
  return grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), arguments);
}

}  // namespace ddo
