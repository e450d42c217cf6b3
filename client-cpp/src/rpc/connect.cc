// Finding ddod, trusting it and opening the lease (client_impl.h).
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <set>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "channel.h"
#include "client_impl.h"
#include "ddo/wire/daemon_address.h"
#include "ddo/wire/daemon_checks.h"
#include "ddo/wire/identity_protocol.h"

namespace ddo {
namespace {

// The longest wait for one candidate address during discovery.
constexpr double kProbeTimeoutSeconds = 2.0;

constexpr char kStartHint[] =
    "start a shared daemon with `ddod --preset warm_process`, or set DDO_DAEMON to the address "
    "of a running ddod";

// Why nothing can listen at `path`; "" when a socket file is there.
std::string SocketFileProblem(const std::string& path) {
  struct stat info {};
  if (::lstat(path.c_str(), &info) != 0) {
    return errno == ENOENT ? "no socket file"
                           : absl::StrCat("cannot stat the socket: ", std::strerror(errno));
  }
  return S_ISSOCK(info.st_mode) ? "" : "not a socket";
}

// A channel to `target` when ddod there reports SERVING; else the reason, for the attempt list.
// A Unix socket another user could have put there is refused outright (PERMISSION_DENIED), not
// skipped: the user should learn that someone may be impersonating their ddod.
absl::StatusOr<std::shared_ptr<grpc::Channel>> Probe(const std::string& target,
                                                     const std::set<uid_t>& trusted,
                                                     double timeout_seconds, std::string* why) {
  // Everything is checked before the first byte, the health check included (issue 31).
  if (const std::string path = UnixSocketPath(target); !path.empty()) {
    if (absl::Status own = CheckPerUserDirectoryOf(path); !own.ok()) return own;
    *why = SocketFileProblem(path);
    if (!why->empty()) return nullptr;
    if (absl::Status placed = CheckSocketLocation(path, trusted); !placed.ok()) return placed;
  } else {
    if (TcpListenerOwners(TcpPort(target)).empty()) {
      *why = absl::StrCat("nothing listens on port ", TcpPort(target));
      return nullptr;
    }
    if (absl::Status held = CheckTcpListener(target, TcpPort(target), trusted); !held.ok()) {
      return held;
    }
  }
  std::shared_ptr<grpc::Channel> channel = MakeChannel(target);
  absl::StatusOr<std::string> health = CheckHealth(channel, "", timeout_seconds);
  if (!health.ok()) {
    *why = absl::StrCat(absl::StatusCodeToString(health.status().code()), ": ",
                        health.status().message());
    return nullptr;
  }
  if (*health != "SERVING") {
    *why = absl::StrCat("health ", *health);
    return nullptr;
  }
  return channel;
}

// Where the daemon at `target` has its identity socket: beside a Unix socket; over TCP, where
// GetInfo (which needs no token) says, once the port is known to be a trusted user's.
absl::StatusOr<std::string> IdentitySocketOf(const std::string& target, ddo::v1::Ddo::Stub& stub,
                                             const std::set<uid_t>& trusted,
                                             double timeout_seconds) {
  if (const std::string path = UnixSocketPath(target); !path.empty()) {
    return IdentitySocketPath(path);
  }
  // The identity socket proves only who serves *it*: an impostor on the port would get the token.
  if (absl::Status held = CheckTcpListener(target, TcpPort(target), trusted); !held.ok()) {
    return held;
  }
  grpc::ClientContext context;
  SetDeadline(&context, timeout_seconds);
  ddo::v1::DaemonInfo info;
  const grpc::Status got = stub.GetInfo(&context, ddo::v1::GetInfoRequest(), &info);
  if (!got.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(got.error_code()),
                        absl::StrCat("GetInfo: ", got.error_message()));
  }
  if (info.identity_socket().empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "ddod at ", target, " names no identity socket in GetInfo: it is older than this "
        "client (update ddod)"));
  }
  return info.identity_socket();
}

// Identity, then the lease, on a daemon that answered.
absl::StatusOr<std::unique_ptr<RpcClient::Impl>> Open(
    std::shared_ptr<grpc::Channel> channel, const std::string& target,
    const std::set<uid_t>& trusted, const ConnectOptions& options,
    std::unique_ptr<EmbeddedDaemon> embedded) {
  auto impl = std::make_unique<RpcClient::Impl>();
  impl->embedded = std::move(embedded);
  impl->target = target;
  impl->timeout_seconds = options.timeout_seconds;
  impl->channel = std::move(channel);
  impl->stub = ddo::v1::Ddo::NewStub(impl->channel);
  absl::StatusOr<std::string> identity_path =
      IdentitySocketOf(target, *impl->stub, trusted, options.timeout_seconds);
  if (!identity_path.ok()) return identity_path.status();
  struct stat info {};
  if (::lstat(identity_path->c_str(), &info) != 0) {
    return absl::UnavailableError(absl::StrCat(
        "cannot connect to ddod's identity socket ", *identity_path, ": ", std::strerror(errno),
        " (is ddod older than this client?)"));
  }
  if (absl::Status placed = CheckSocketLocation(*identity_path, trusted); !placed.ok()) {
    return placed;
  }
  const int timeout_ms = static_cast<int>(std::min(options.timeout_seconds * 1000.0, 3.6e6));
  absl::StatusOr<IdentityLink> identity =
      IdentityLink::Connect(*identity_path, trusted, std::max(timeout_ms, 1));
  if (!identity.ok()) return identity.status();
  impl->identity = std::make_unique<IdentityLink>(*std::move(identity));
  absl::StatusOr<std::unique_ptr<Lease>> lease = Lease::Open(
      *impl->stub, impl->identity->token(), options.client_name, options.timeout_seconds);
  if (!lease.ok()) {
    return absl::Status(lease.status().code(),
                        absl::StrCat("Connect: ", lease.status().message()));
  }
  impl->lease = *std::move(lease);
  return impl;
}

}  // namespace

void RpcClient::Impl::Prepare(grpc::ClientContext* context, bool with_token) const {
  SetDeadline(context, timeout_seconds);
  if (with_token) context->AddMetadata("ddo-token", identity->token());
}

absl::StatusOr<std::unique_ptr<RpcClient::Impl>> ConnectToDaemon(const ConnectOptions& options) {
  if (!(options.timeout_seconds > 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "timeout_seconds=", options.timeout_seconds, " must be a positive number of seconds"));
  }
  std::optional<std::string> address;
  if (!options.address.empty()) {
    address = options.address;
  } else if (const char* value = std::getenv("DDO_DAEMON"); value != nullptr) {
    address = value;
  }
  absl::StatusOr<DaemonTargets> targets =
      ResolveDaemonTargets(address, SocketUser::FromProcess());
  if (!targets.ok()) return targets.status();
  if (targets->embedded && options.allow_embedded == false) {
    return absl::InvalidArgumentError(
        "the daemon address is 'embedded' (a private ddod), but allow_embedded is false");
  }
  // "embedded" counts as fixed for ddoctl, but it asks for a private ddod.
  const bool may_embed = options.allow_embedded.value_or(!targets->fixed || targets->embedded);
  const std::set<uid_t> trusted = TrustedDaemonUidsFromEnvironment();

  std::vector<std::string> attempts;
  for (const std::string& target : targets->targets) {
    std::string why;
    absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
        Probe(target, trusted, std::min(options.timeout_seconds, kProbeTimeoutSeconds), &why);
    if (!channel.ok()) return channel.status();
    if (*channel != nullptr) return Open(*std::move(channel), target, trusted, options, nullptr);
    attempts.push_back(absl::StrCat(target, " (", why, ")"));
  }
  const std::string tried = attempts.empty() ? "no address" : absl::StrJoin(attempts, "; ");
  if (!may_embed) {
    return absl::UnavailableError(absl::StrCat("no ddod answered at ", tried, ": ", kStartHint));
  }
  absl::StatusOr<std::unique_ptr<EmbeddedDaemon>> daemon = EmbeddedDaemon::Start();
  if (!daemon.ok()) {
    if (attempts.empty()) return daemon.status();
    return absl::Status(daemon.status().code(),
                        absl::StrCat("no ddod answered at ", tried,
                                     ", and starting a private one failed: ",
                                     daemon.status().message()));
  }
  const std::string target = absl::StrCat("unix:", (*daemon)->socket_path());
  return Open(MakeChannel(target), target, trusted, options, *std::move(daemon));
}

}  // namespace ddo
