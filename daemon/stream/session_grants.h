// File: daemon/stream/session_grants.h
//
// What a streaming session's runner may map, and how: the component's segments read-only
// (store/segment_grants.h), the control block and the device's doorbell read-write (the runner
// writes its counters and rings ddod), and on the host backend the resident slab and the ring
// read-only (only ddod's copy worker writes them). A GPU session's slab and ring travel as CUDA
// IPC handles, not segments, and are not granted here.
//
// Thread-safety: a pure function of its argument.
#ifndef DDO_DAEMON_STREAM_SESSION_GRANTS_H_
#define DDO_DAEMON_STREAM_SESSION_GRANTS_H_

#include <vector>

#include "daemon/identity/segment_grant.h"
#include "daemon/stream/stream_sessions.h"

namespace ddo {

std::vector<SegmentGrant> SessionGrants(const OpenedStream& opened);

}  // namespace ddo

#endif  // DDO_DAEMON_STREAM_SESSION_GRANTS_H_
