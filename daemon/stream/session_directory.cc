// File: daemon/stream/session_directory.cc
#include "daemon/stream/session_directory.h"

#include <map>
#include <utility>

namespace ddo {

void SessionDirectory::ReleaseLease(const std::string& lease_id) {
  streams_.ReleaseLease(lease_id);
  store_.ReleaseLease(lease_id);
}

absl::Status SessionDirectory::Detach(const std::string& session_id, const Caller& caller) {
  absl::StatusOr<SessionRecord> session = sessions_.FindFor(session_id, caller);
  if (!session.ok()) return session.status();
  if (!session->device.empty()) return streams_.Detach(session_id);
  return store_.Detach(session_id, caller);
}

absl::StatusOr<uint32_t> SessionDirectory::SetSchedule(const std::string& session_id,
                                                       const Caller& caller,
                                                       std::vector<uint32_t> schedule,
                                                       WeightRows rows) {
  absl::Status owner = sessions_.FindFor(session_id, caller).status();
  if (!owner.ok()) return owner;
  return streams_.SetSchedule(session_id, std::move(schedule), std::move(rows));
}

std::vector<Lease> SessionDirectory::LeasesOf(const Caller& caller) const {
  std::vector<Lease> visible;
  for (Lease& lease : leases_.List()) {
    if (caller.admin || lease.caller.uid == caller.uid) visible.push_back(std::move(lease));
  }
  return visible;
}

std::vector<SessionView> SessionDirectory::SessionsOf(const Caller& caller) const {
  std::map<std::string, int64_t> pids;
  for (const Lease& lease : leases_.List()) pids[lease.id] = lease.client_pid;
  std::map<std::string, StreamSessionInfo> streaming;
  for (StreamSessionInfo& stream : streams_.List()) {
    std::string id = stream.session_id;
    streaming.emplace(std::move(id), std::move(stream));
  }
  std::vector<SessionView> visible;
  for (SessionRecord& session : sessions_.List()) {
    if (!caller.admin && session.uid != caller.uid) continue;
    SessionView view;
    if (auto it = streaming.find(session.id); it != streaming.end()) {
      view.stream = std::move(it->second);
    }
    if (auto it = pids.find(session.lease_id); it != pids.end()) view.client_pid = it->second;
    view.record = std::move(session);
    visible.push_back(std::move(view));
  }
  return visible;
}

}  // namespace ddo
