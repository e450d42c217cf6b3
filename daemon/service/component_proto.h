// File: daemon/service/component_proto.h
//
// Store snapshots as protocol messages.
//
// Thread-safety: pure functions, safe from any thread.
#ifndef DDO_DAEMON_SERVICE_COMPONENT_PROTO_H_
#define DDO_DAEMON_SERVICE_COMPONENT_PROTO_H_

#include "daemon/store/component_store.h"
#include "ddo/v1/components.pb.h"

namespace ddo {

void ToProto(const ComponentSnapshot& snapshot, ddo::v1::ComponentRef* ref);

// `with_layout`: include every segment the component uses (its own first), the placements
// (each indexing those segments) and the tensor table.
void ToProto(const ComponentSnapshot& snapshot, bool with_layout, ddo::v1::ComponentInfo* info);

// Where an upload writes: the component's own segment (the only one listed, index 0) and the
// placements of the tensors stored in it (all of them, or a derived version's changed ones).
void UploadLayoutToProto(const ComponentSnapshot& snapshot,
                         ddo::v1::RegisterComponentResponse* response);

}  // namespace ddo

#endif  // DDO_DAEMON_SERVICE_COMPONENT_PROTO_H_
