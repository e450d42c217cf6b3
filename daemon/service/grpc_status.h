// File: daemon/service/grpc_status.h
//
// The RPC edge: absl::Status codes are the gRPC codes, so the mapping is 1:1 and the message
// travels unchanged.
//
// Thread-safety: a pure function, safe from any thread.
#ifndef DDO_DAEMON_SERVICE_GRPC_STATUS_H_
#define DDO_DAEMON_SERVICE_GRPC_STATUS_H_

#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace ddo {

grpc::Status ToGrpcStatus(const absl::Status& status);

}  // namespace ddo

#endif  // DDO_DAEMON_SERVICE_GRPC_STATUS_H_
