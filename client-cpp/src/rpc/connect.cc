// Finding ddod and trusting it (ConnectToDaemon, ddo/wire/connect_to_daemon.h), or starting a
// private one, then opening the lease (client_impl.h).
#include <algorithm>
#include <cstdlib>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "channel.h"
#include "client_impl.h"
#include "ddo/wire/connect_to_daemon.h"
#include "ddo/wire/daemon_address.h"
#include "ddo/wire/daemon_checks.h"

namespace ddo {
namespace {

// The longest wait for one candidate address during discovery.
constexpr double kProbeTimeoutSeconds = 2.0;

constexpr char kStartHint[] =
    "start a shared daemon with `ddod --preset warm_process`, or set DDO_DAEMON to the address "
    "of a running ddod";

// The lease, on a daemon ConnectToDaemon found and trusted.
absl::StatusOr<std::unique_ptr<RpcClient::Impl>> Open(DaemonConnection daemon,
                                                      const ConnectOptions& options,
                                                      std::unique_ptr<EmbeddedDaemon> embedded) {
  auto impl = std::make_unique<RpcClient::Impl>();
  impl->embedded = std::move(embedded);
  impl->target = daemon.target;
  impl->timeout_seconds = options.timeout_seconds;
  impl->channel = std::move(daemon.channel);
  impl->stub = ddo::v1::Ddo::NewStub(impl->channel);
  impl->identity = std::move(daemon.identity);
  absl::StatusOr<std::unique_ptr<Lease>> lease = Lease::Open(
      *impl->stub, impl->identity->token(), options.client_name, options.timeout_seconds);
  if (!lease.ok()) {
    return absl::Status(lease.status().code(),
                        absl::StrCat("Connect: ", lease.status().message()));
  }
  impl->lease = *std::move(lease);
  return impl;
}

// ConnectToDaemon's options for a client whose calls wait `timeout_seconds`.
DaemonConnectOptions ConnectOptionsFor(double timeout_seconds) {
  DaemonConnectOptions options;
  options.trusted = TrustedDaemonUidsFromEnvironment();
  options.health_timeout = absl::Seconds(std::min(timeout_seconds, kProbeTimeoutSeconds));
  options.call_timeout = absl::Seconds(std::min(timeout_seconds, 3600.0));
  return options;
}

}  // namespace

void RpcClient::Impl::Prepare(grpc::ClientContext* context, bool with_token) const {
  SetDeadline(context, timeout_seconds);
  if (with_token) context->AddMetadata("ddo-token", identity->token());
}

absl::StatusOr<std::unique_ptr<RpcClient::Impl>> ConnectClient(const ConnectOptions& options) {
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
  const DaemonConnectOptions connect = ConnectOptionsFor(options.timeout_seconds);

  absl::Status none = absl::OkStatus();
  if (!targets->targets.empty()) {
    absl::StatusOr<DaemonConnection> daemon = ConnectToDaemon(*targets, connect);
    if (daemon.ok()) return Open(*std::move(daemon), options, nullptr);
    if (!NoDaemonAnswered(daemon.status())) return daemon.status();
    none = daemon.status();
  }
  if (!may_embed) {
    return absl::UnavailableError(absl::StrCat(
        none.ok() ? "no ddod answered at no address" : none.message(), ": ", kStartHint));
  }
  absl::StatusOr<std::unique_ptr<EmbeddedDaemon>> embedded = EmbeddedDaemon::Start();
  if (!embedded.ok()) {
    if (none.ok()) return embedded.status();
    return absl::Status(embedded.status().code(),
                        absl::StrCat(none.message(), ", and starting a private one failed: ",
                                     embedded.status().message()));
  }
  // The private ddod goes through the same sequence as any other.
  DaemonTargets own;
  own.targets = {absl::StrCat("unix:", (*embedded)->socket_path())};
  own.fixed = true;
  absl::StatusOr<DaemonConnection> daemon = ConnectToDaemon(own, connect);
  if (!daemon.ok()) return daemon.status();
  return Open(*std::move(daemon), options, *std::move(embedded));
}

}  // namespace ddo
