// File: client-cpp/src/rpc/convert.h
//
// ddo.v1 messages to and from the plain structs of ddo/rpc.h: the only place the client reads
// or writes protobuf fields ("protobuf at the edge", as in the daemon).
//
// Thread-safety: pure functions of their arguments, safe from any thread.
#ifndef DDO_CLIENT_RPC_CONVERT_H_
#define DDO_CLIENT_RPC_CONVERT_H_

#include "ddo/rpc.h"
#include "ddo/v1/components.pb.h"
#include "ddo/v1/info.pb.h"
#include "ddo/v1/sessions.pb.h"
#include "ddo/v1/settings.pb.h"

namespace ddo {

void ToProto(const TensorSpec& spec, ddo::v1::TensorSpec* out);
TensorSpec FromProto(const ddo::v1::TensorSpec& spec);
ComponentInfo FromProto(const ddo::v1::ComponentInfo& info);
ComponentInfo FromProto(const ddo::v1::ComponentRef& ref);
DaemonInfo FromProto(const ddo::v1::DaemonInfo& info);
PlanExplanation FromProto(const ddo::v1::PlanExplanation& plan);
DeviceResources FromProto(const ddo::v1::DeviceResources& device);
AttachAnswer FromProto(const ddo::v1::AttachResponse& response);
Upload FromProto(const ddo::v1::RegisterComponentResponse& response);
ResolvedSettings FromProto(const ddo::v1::ResolvedSettings& settings);

}  // namespace ddo

#endif  // DDO_CLIENT_RPC_CONVERT_H_
