// File: client-cpp/src/rpc/channel.h
//
// gRPC channels to ddod and the standard health check, as ddoctl and the Python client make
// them (insecure: the identity socket, not TLS, says who is who; messages up to ddod's 64 MiB).
//
// Thread-safety: any thread; a grpc::Channel may be shared by threads, each call makes its own
// context.
#ifndef DDO_CLIENT_RPC_CHANNEL_H_
#define DDO_CLIENT_RPC_CHANNEL_H_

#include <grpcpp/channel.h>
#include <grpcpp/client_context.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace ddo {

// MakeDaemonChannel (ddo/wire/connect_to_daemon.h), as ddoctl makes it.
std::shared_ptr<grpc::Channel> MakeChannel(const std::string& target);

// A deadline `seconds` from now.
void SetDeadline(grpc::ClientContext* context, double seconds);

// grpc.health.v1.Health/Check of `service` ("" is the daemon): "SERVING", "NOT_SERVING", ...
// The call's failure as its status (message verbatim).
absl::StatusOr<std::string> CheckHealth(const std::shared_ptr<grpc::Channel>& channel,
                                        const std::string& service, double timeout_seconds);

// True when a fresh channel to `target` answers SERVING within `timeout_seconds` (a channel
// that failed once would wait out gRPC's reconnect backoff).
bool IsServing(const std::string& target, double timeout_seconds);

}  // namespace ddo

#endif  // DDO_CLIENT_RPC_CHANNEL_H_
