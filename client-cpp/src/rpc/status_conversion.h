// File: client-cpp/src/rpc/status_conversion.h
//
// gRPC's and absl's statuses as ddo::Status: the code kept (the three number alike) and the
// message verbatim, so a C++ runner shows ddod's own words.
//
// Thread-safety: pure functions of their arguments, safe from any thread.
#ifndef DDO_CLIENT_RPC_STATUS_CONVERSION_H_
#define DDO_CLIENT_RPC_STATUS_CONVERSION_H_

#include <grpcpp/support/status.h>

#include "absl/status/status.h"
#include "ddo/status.h"

namespace ddo {

inline Status FromGrpc(const grpc::Status& status) {
  if (status.ok()) return OkStatus();
  return Status(static_cast<StatusCode>(status.error_code()), status.error_message());
}

inline Status FromAbsl(const absl::Status& status) {
  if (status.ok()) return OkStatus();
  return Status(static_cast<StatusCode>(status.code()), std::string(status.message()));
}

}  // namespace ddo

#endif  // DDO_CLIENT_RPC_STATUS_CONVERSION_H_
