// File: daemon/service/component_proto.h
//
// Store snapshots as protocol messages.
//
// Thread-safety: pure functions, safe from any thread.
#ifndef DDO_DAEMON_SERVICE_COMPONENT_PROTO_H_
#define DDO_DAEMON_SERVICE_COMPONENT_PROTO_H_

#include <vector>

#include "daemon/identity/segment_grant.h"
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
// A streamed upload's answer: each of `snapshot`'s own tensors placed at its offset with the
// stream that carries it (upload_pipes.h's AssignStreams), and the streams' names (`grants`,
// StreamGrants's); no segment.
void StreamedUploadToProto(const ComponentSnapshot& snapshot,
                           const std::vector<SegmentGrant>& grants,
                           ddo::v1::RegisterComponentResponse* response);

}  // namespace ddo

#endif  // DDO_DAEMON_SERVICE_COMPONENT_PROTO_H_
