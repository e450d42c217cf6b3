// File: daemon/service/stream_opener.h
//
// Opens a streaming session as Attach asks for one, in the order its errors are reported: the
// device (NotFound), the session's settings (InvalidArgument), the component attached on the
// host (NotFound, PermissionDenied), its plan decided by policy for this machine
// (policy/stream_planning), then the session opened on that plan (stream/stream_sessions). A
// failure after the attach gives the attachment back.
//
// Thread-safety: as ComponentStore and StreamSessions.
#ifndef DDO_DAEMON_SERVICE_STREAM_OPENER_H_
#define DDO_DAEMON_SERVICE_STREAM_OPENER_H_

#include <map>
#include <set>
#include <string>

#include "absl/status/statusor.h"
#include "daemon/policy/resident_policy.h"
#include "daemon/session/lease_registry.h"
#include "daemon/store/component_store.h"
#include "daemon/stream/stream_sessions.h"

namespace ddo {

struct StreamAttachRequest {
  std::string cache_key;
  std::string device;  // "cpu", "cpu:<n>", a GPU UUID or "cuda:<n>"
  std::map<std::string, std::string> settings;  // the session's DDO_* values
  std::set<std::string> streamable;  // tensor names the runner can take from the ring
};

absl::StatusOr<OpenedStream> OpenStream(ComponentStore& store, StreamSessions& streams,
                                        const Lease& lease, const StreamAttachRequest& request,
                                        const MachineFacts& machine);

}  // namespace ddo

#endif  // DDO_DAEMON_SERVICE_STREAM_OPENER_H_
