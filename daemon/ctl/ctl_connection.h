// File: daemon/ctl/ctl_connection.h
//
// ddoctl's connection to a running ddod, found and trusted by ConnectToDaemon
// (ddo/wire/connect_to_daemon.h: location and owner checks before any byte, health SERVING,
// the identity socket checked, the handshake). When no target answers, the error lists every
// address tried and why, with a hint. Every call it prepares carries the identity token.
//
// Thread-safety: one thread uses a connection at a time (ddoctl's main thread); PassFile goes
// through IdentityLink, which pairs each request with its answer under its own mutex.
#ifndef DDO_DAEMON_CTL_CTL_CONNECTION_H_
#define DDO_DAEMON_CTL_CTL_CONNECTION_H_

#include <grpcpp/channel.h>
#include <grpcpp/client_context.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "ddo/v1/ddo.grpc.pb.h"
#include "ddo/wire/daemon_address.h"
#include "ddo/wire/identity_client.h"

namespace ddo {

class CtlConnection {
 public:
  // ConnectToDaemon's error, with a hint to start a daemon when no target answers; `timeout`
  // bounds each step and every later call.
  static absl::StatusOr<CtlConnection> Open(const DaemonTargets& targets, absl::Duration timeout);

  ddo::v1::Ddo::Stub& stub() { return *stub_; }
  // Sets the deadline and the caller's token on a call's context.
  void Prepare(grpc::ClientContext* context) const;
  const std::string& target() const { return target_; }
  // What the health check answered: "SERVING", the only answer ConnectToDaemon accepts.
  const std::string& health() const { return health_; }
  absl::Duration timeout() const { return timeout_; }
  // The uid the daemon runs as (from the kernel, on the identity socket).
  uid_t daemon_uid() const { return identity_->daemon_uid(); }
  // FILE on the identity socket: passes a descriptor ddod may read for this caller.
  absl::StatusOr<uint64_t> PassFile(const std::string& base_name, int fd) {
    return identity_->PassFile(base_name, fd);
  }

 private:
  std::string target_;
  std::string health_ = "SERVING";
  absl::Duration timeout_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<ddo::v1::Ddo::Stub> stub_;
  std::shared_ptr<IdentityLink> identity_;
};

}  // namespace ddo

#endif  // DDO_DAEMON_CTL_CTL_CONNECTION_H_
