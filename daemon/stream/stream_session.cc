// File: daemon/stream/stream_session.cc
#include "daemon/stream/stream_session.h"

#include "absl/strings/str_cat.h"
#include "daemon/common/logging.h"

namespace ddo {
namespace {

// How long closing a session waits for its queued copies.
constexpr absl::Duration kDrainTimeout = absl::Seconds(2);

}  // namespace

StreamSession::StreamSession(std::string id, std::string lease_id, std::string cache_key,
                             std::string device, std::vector<TensorEntry> tensors,
                             std::shared_ptr<PoolSegment> host, SessionPlan plan,
                             std::unique_ptr<SessionDevice> device_memory, ControlBlock control)
    : id_(std::move(id)),
      lease_id_(std::move(lease_id)),
      cache_key_(std::move(cache_key)),
      device_(std::move(device)),
      tensors_(std::move(tensors)),
      host_(std::move(host)),
      plan_(std::move(plan)),
      device_memory_(std::move(device_memory)),
      control_(std::move(control)) {}

StreamSession::~StreamSession() = default;

absl::Status StreamSession::FillSlab() {
  for (const PlannedTensor& placed : plan_.resident) {
    const TensorEntry& tensor = tensors_[placed.table_index];
    if (tensor.byte_size == 0) continue;
    if (absl::Status copied = device_memory_->CopyToSlab(
            placed.offset, host_->data() + tensor.offset, tensor.byte_size);
        !copied.ok()) {
      return absl::Status(copied.code(),
                          absl::StrCat("filling the slab with '", tensor.name, "': ", copied.message()));
    }
  }
  return device_memory_->Drain(absl::Minutes(5));
}

absl::Status StreamSession::SetSchedule(std::vector<uint32_t> schedule) {
  if (schedule.empty()) {
    return absl::InvalidArgumentError("the schedule is empty: send the units the first forward used");
  }
  for (uint32_t unit : schedule) {
    if (unit >= plan_.units.size()) {
      return absl::InvalidArgumentError(absl::StrCat("the schedule names unit ", unit,
                                                     "; the session has ", plan_.units.size()));
    }
  }
  absl::MutexLock lock(&mu_);
  if (!schedule_.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("session ", id_, " already has a schedule (", schedule_.size(), " uses)"));
  }
  control_.set_schedule_length(static_cast<uint32_t>(schedule.size()));
  schedule_ = std::move(schedule);
  return absl::OkStatus();
}

bool StreamSession::HasWork() {
  if (stopped_.load()) return false;
  if (control_.sync_request().load() > sync_served_) return true;
  if (worker_schedule_.empty()) {
    absl::MutexLock lock(&mu_);
    if (schedule_.empty()) return false;
    worker_schedule_ = schedule_;
  }
  const uint64_t consumed = control_.consumed().load();
  return std::max(next_use_, consumed) < consumed + plan_.ring_slots;
}

bool StreamSession::Step() {
  if (stopped_.load() || plan_.units.empty()) return false;
  const uint32_t sync_slot = plan_.ring_slots;

  // An out-of-schedule request first: the runner is waiting for it.
  const uint64_t request = control_.sync_request().load();
  if (request > sync_served_) {
    const uint32_t unit = control_.sync_unit().load();
    if (unit >= plan_.units.size()) {
      Fail(absl::InvalidArgumentError(absl::StrCat("the runner asked for unit ", unit, " of ",
                                                   plan_.units.size())));
      return true;
    }
    if (!CopyUnit(unit, sync_slot)) return true;
    control_.slot_use(sync_slot).store(request);
    if (absl::Status ready = device_memory_->MarkReady(sync_slot); !ready.ok()) {
      Fail(ready);
      return true;
    }
    sync_served_ = request;
    sync_uses_.fetch_add(1);
    control_.sync_done().store(request);
    control_.WakeRunner();
    return true;
  }

  if (worker_schedule_.empty()) {
    absl::MutexLock lock(&mu_);
    if (schedule_.empty()) return false;
    worker_schedule_ = schedule_;
  }
  // The next use, unless the runner skipped past it.
  const uint64_t consumed = control_.consumed().load();
  const uint64_t use = std::max(next_use_, consumed);
  if (use >= consumed + plan_.ring_slots) return false;  // the ring is full
  const uint32_t slot = static_cast<uint32_t>(use % plan_.ring_slots);
  const uint32_t unit = worker_schedule_[use % worker_schedule_.size()];
  if (!CopyUnit(unit, slot)) return true;
  control_.slot_use(slot).store(use);
  if (absl::Status ready = device_memory_->MarkReady(slot); !ready.ok()) {
    Fail(ready);
    return true;
  }
  next_use_ = use + 1;
  produced_.fetch_add(1);
  control_.ready().store(use + 1);
  control_.WakeRunner();
  return true;
}

bool StreamSession::CopyUnit(uint32_t unit, uint32_t slot) {
  // Later copies into the slot wait for the runner's kernels that read its previous unit.
  if (absl::Status waited = device_memory_->WaitConsumed(slot); !waited.ok()) {
    Fail(waited);
    return false;
  }
  const StreamUnit& planned = plan_.units[unit];
  for (const PlannedTensor& placed : planned.tensors) {
    const TensorEntry& tensor = tensors_[placed.table_index];
    if (absl::Status copied = device_memory_->CopyToSlot(slot, placed.offset,
                                                         host_->data() + tensor.offset,
                                                         tensor.byte_size);
        !copied.ok()) {
      Fail(copied);
      return false;
    }
  }
  streamed_bytes_.fetch_add(planned.tensor_bytes);
  return true;
}

void StreamSession::Fail(const absl::Status& status) {
  Logger("stream")->error("session {} ({} on {}) failed: {}", id_, cache_key_, device_,
                          status.ToString());
  stopped_.store(true);
  control_.set_state(SessionState::kFailed);
}

void StreamSession::Close(SessionState state) {
  stopped_.store(true);
  if (control_.state() == SessionState::kOpen) control_.set_state(state);
  if (absl::Status drained = device_memory_->Drain(kDrainTimeout); !drained.ok()) {
    Logger("stream")->warn("session {}: {}", id_, drained.ToString());
  }
}

StreamSessionStats StreamSession::Stats() {
  StreamSessionStats stats;
  stats.produced_uses = produced_.load();
  stats.sync_uses = sync_uses_.load();
  stats.streamed_bytes = streamed_bytes_.load();
  stats.consumed_uses = control_.consumed_uses();
  stats.skipped_uses = control_.skipped_uses();
  {
    absl::MutexLock lock(&mu_);
    stats.schedule_length = static_cast<uint32_t>(schedule_.size());
  }
  stats.failed = control_.state() == SessionState::kFailed;
  return stats;
}

}  // namespace ddo
