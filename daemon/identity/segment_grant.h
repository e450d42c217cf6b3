// File: daemon/identity/segment_grant.h
//
// One shared-memory segment a caller may have ddod open for it (OPEN on the identity socket),
// and whether read-write. The layers that own the segments say which ones an answer grants
// (store/segment_grants.h for components and uploads, stream/session_grants.h for a streaming
// session's); the service hands the list to CallerRegistry::Grant with the caller's token.
//
// Thread-safety: a value type.
#ifndef DDO_DAEMON_IDENTITY_SEGMENT_GRANT_H_
#define DDO_DAEMON_IDENTITY_SEGMENT_GRANT_H_

#include <string>

namespace ddo {

struct SegmentGrant {
  std::string shm_name;
  bool writable = false;
};

}  // namespace ddo

#endif  // DDO_DAEMON_IDENTITY_SEGMENT_GRANT_H_
