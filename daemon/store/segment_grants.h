// File: daemon/store/segment_grants.h
//
// Which of a component's segments an answer lets its caller map, and how: the grant rules of the
// store's answers (Attach, GetComponent, RegisterComponent), kept beside the segments they cover
// rather than in the handlers.
//   - A component's segments are read-only to everyone, a derived version's shared ones too:
//     the pool's bytes change only through an upload.
//   - A file-tier component's backing files are read-only file grants, served from the
//     descriptors ddod holds (never reopened by path).
//   - An upload's caller may write the one segment the upload fills, the component's own;
//     a streamed upload's caller gets only its pipes' write ends, each once, never the segment.
//
// Thread-safety: pure functions of their arguments.
#ifndef DDO_DAEMON_STORE_SEGMENT_GRANTS_H_
#define DDO_DAEMON_STORE_SEGMENT_GRANTS_H_

#include <memory>
#include <string>
#include <vector>

#include "daemon/identity/segment_grant.h"
#include "daemon/store/component_store.h"

namespace ddo {

// Every segment (and every backing file) of `component`, read-only.
std::vector<SegmentGrant> ReadGrants(const ComponentSnapshot& component);

// The segment an upload of `component` writes, read-write (none while it has no segment).
std::vector<SegmentGrant> UploadGrants(const ComponentSnapshot& component);

// The pipes of streamed upload `upload_id`, in stream order: write-only, each served once,
// named "/ddo-stream-<upload_id>-<stream>".
std::vector<SegmentGrant> StreamGrants(
    const std::string& upload_id,
    const std::vector<std::shared_ptr<const UniqueFd>>& write_ends);

}  // namespace ddo

#endif  // DDO_DAEMON_STORE_SEGMENT_GRANTS_H_
