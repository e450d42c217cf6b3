// File: daemon/service/stream_opener.cc
#include "daemon/service/stream_opener.h"

#include "absl/cleanup/cleanup.h"
#include "daemon/common/status_macros.h"
#include "daemon/policy/stream_planning.h"
#include "daemon/policy/stream_settings.h"

namespace ddo {

absl::StatusOr<OpenedStream> OpenStream(ComponentStore& store, StreamSessions& streams,
                                        const Lease& lease, const StreamAttachRequest& request,
                                        const MachineFacts& machine) {
  DDO_RETURN_IF_ERROR(streams.CheckDevice(request.device));
  DDO_ASSIGN_OR_RETURN(StreamSettings settings, ParseStreamSettings(request.settings));
  DDO_ASSIGN_OR_RETURN(HostAttachment attached, store.AttachHost(lease, request.cache_key));
  const std::string session_id = attached.session_id;
  absl::Cleanup give_back = [&] { (void)store.Detach(session_id, lease.caller); };
  const WeightRows rows = streams.LearnedRows(attached.component.owner_uid, request.cache_key,
                                             attached.component.base_cache_key);
  DDO_ASSIGN_OR_RETURN(SessionPlan plan,
                       PlanStreamSession(attached.component.tensors, request.streamable,
                                         std::move(settings), request.settings, machine, rows));
  DDO_ASSIGN_OR_RETURN(OpenedStream opened,
                       streams.Open(lease, std::move(attached), request.device, std::move(plan)));
  std::move(give_back).Cancel();  // the session holds the component now
  return opened;
}

}  // namespace ddo
