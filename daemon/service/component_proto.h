// File: daemon/service/component_proto.h
//
// Store snapshots as protocol messages.
#ifndef DDO_DAEMON_SERVICE_COMPONENT_PROTO_H_
#define DDO_DAEMON_SERVICE_COMPONENT_PROTO_H_

#include "daemon/store/component_store.h"
#include "ddo/v1/components.pb.h"

namespace ddo {

void ToProto(const ComponentSnapshot& snapshot, ddo::v1::ComponentRef* ref);

// `with_layout`: include the segment, the placements and the tensor table.
void ToProto(const ComponentSnapshot& snapshot, bool with_layout, ddo::v1::ComponentInfo* info);

}  // namespace ddo

#endif  // DDO_DAEMON_SERVICE_COMPONENT_PROTO_H_
