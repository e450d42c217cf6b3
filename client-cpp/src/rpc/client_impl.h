// File: client-cpp/src/rpc/client_impl.h
//
// What an RpcClient holds, and how a connection is made (connect.cc: the discovery of
// docs/protocol.md "Finding the daemon", as the Python client's client.py does it).
//
// Thread-safety: as RpcClient's (ddo/rpc.h): the members are set once by ConnectToDaemon and then
// only read; the stub and channel are gRPC's thread-safe objects, the lease locks its own.
#ifndef DDO_CLIENT_RPC_CLIENT_IMPL_H_
#define DDO_CLIENT_RPC_CLIENT_IMPL_H_

#include <grpcpp/channel.h>
#include <grpcpp/client_context.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "ddo/rpc.h"
#include "ddo/v1/ddo.grpc.pb.h"
#include "ddo/wire/identity_client.h"
#include "embedded_daemon.h"
#include "lease.h"

namespace ddo {

// Members are destroyed bottom-up: the lease ends first (ddod releases the sessions at once),
// then the channel and the identity connection (the token dies), then a private ddod stops.
// Hidden: a nested class would inherit RpcClient's export, and with it gRPC's types.
struct __attribute__((visibility("hidden"))) RpcClient::Impl {
  std::string target;
  double timeout_seconds = 5.0;
  std::unique_ptr<EmbeddedDaemon> embedded;
  std::unique_ptr<IdentityLink> identity;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<ddo::v1::Ddo::Stub> stub;
  std::unique_ptr<Lease> lease;

  // The call's deadline and, except for GetInfo, the identity token.
  void Prepare(grpc::ClientContext* context, bool with_token = true) const;
};

absl::StatusOr<std::unique_ptr<RpcClient::Impl>> ConnectClient(const ConnectOptions& options);

}  // namespace ddo

#endif  // DDO_CLIENT_RPC_CLIENT_IMPL_H_
