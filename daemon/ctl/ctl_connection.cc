#include "daemon/ctl/ctl_connection.h"

#include <grpcpp/client_context.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "ddo/wire/connect_to_daemon.h"
#include "ddo/wire/daemon_checks.h"

namespace ddo {

absl::StatusOr<CtlConnection> CtlConnection::Open(const DaemonTargets& targets,
                                                  absl::Duration timeout) {
  DaemonConnectOptions options;
  options.trusted = TrustedDaemonUidsFromEnvironment();
  options.health_timeout = timeout;
  options.call_timeout = timeout;
  absl::StatusOr<DaemonConnection> found = ConnectToDaemon(targets, options);
  if (!found.ok()) {
    if (!NoDaemonAnswered(found.status())) return found.status();
    return absl::UnavailableError(absl::StrCat(
        found.status().message(),
        ".\nStart one with `ddod --preset warm_process`, or point DDO_DAEMON (or --daemon) at "
        "a running daemon."));
  }
  CtlConnection connection;
  connection.identity_ = std::move(found->identity);
  connection.target_ = found->target;
  connection.timeout_ = timeout;
  connection.channel_ = found->channel;
  connection.stub_ = ddo::v1::Ddo::NewStub(connection.channel_);
  return connection;
}

void CtlConnection::Prepare(grpc::ClientContext* context) const {
  context->set_deadline(absl::ToChronoTime(absl::Now() + timeout_));
  if (identity_ != nullptr) context->AddMetadata("ddo-token", identity_->token());
}

}  // namespace ddo
