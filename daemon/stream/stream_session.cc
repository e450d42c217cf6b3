// File: daemon/stream/stream_session.cc
#include "daemon/stream/stream_session.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/common/logging.h"
#include "daemon/common/status_macros.h"
#include "daemon/stream/slab_file_fill.h"

namespace ddo {
namespace {

// How long closing a session waits for its queued copies.
constexpr absl::Duration kDrainTimeout = absl::Seconds(2);

}  // namespace

StreamSession::StreamSession(std::string id, std::string lease_id, std::string cache_key,
                             std::string device, std::vector<TensorEntry> tensors,
                             ComponentBytes host, SessionPlan plan,
                             std::shared_ptr<ResidentSlab> slab, bool slab_filled,
                             std::unique_ptr<SessionDevice> device_memory, ControlBlock control,
                             FileReading reading)
    : id_(std::move(id)),
      lease_id_(std::move(lease_id)),
      cache_key_(std::move(cache_key)),
      device_(std::move(device)),
      tensors_(std::move(tensors)),
      source_(std::move(host), std::move(reading)),
      plan_(std::move(plan)),
      slab_(std::move(slab)),
      slab_filled_(slab_filled),
      slab_was_warm_(slab_filled),
      device_memory_(std::move(device_memory)),
      control_(std::move(control)) {}

StreamSession::~StreamSession() = default;

absl::Status StreamSession::FillSlab() {
  if (slab_filled_) return absl::OkStatus();
  if (absl::Status filled = FillResidentSlab(*slab_, plan_.resident, tensors_, source_.host());
      !filled.ok()) {
    return filled;
  }
  slab_filled_ = true;
  uint64_t filled_bytes = 0;
  for (const PlannedTensor& placed : plan_.resident) {
    filled_bytes += tensors_[placed.table_index].byte_size;
  }
  slab_bytes_filled_.store(filled_bytes);
  return absl::OkStatus();
}

namespace {

// The threads a slab fill reads a file-tier component's resident tensors with (4 read the
// page cache at 27 GB/s on the H100, docs/benchmarks.md "The file tier": more than the
// slab's pageable copies take).
constexpr int kSlabReadThreads = 4;

}  // namespace

absl::Status FillResidentSlab(ResidentSlab& slab, const std::vector<PlannedTensor>& resident,
                              const std::vector<TensorEntry>& tensors, const ComponentBytes& host) {
  std::vector<SlabFileChunk> file_chunks;
  for (const PlannedTensor& placed : resident) {
    const TensorEntry& tensor = tensors[placed.table_index];
    if (tensor.byte_size == 0) continue;
    if (host.InFile(placed.table_index)) {
      AppendSlabFileChunks(placed.offset, host.files()->ranges()[placed.table_index],
                           tensor.name, file_chunks);
      continue;
    }
    absl::Status copied = slab.Copy(placed.offset, host.DataOf(tensor), tensor.byte_size);
    if (!copied.ok()) {
      return absl::Status(copied.code(), absl::StrCat("filling the slab with '", tensor.name,
                                                      "': ", copied.message()));
    }
  }
  DDO_RETURN_IF_ERROR(FillSlabFromFiles(slab, file_chunks, host, kSlabReadThreads));
  return slab.Finish();
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
  if (!in_flight_.empty() || sync_in_flight_ != 0) return true;
  if (const uint64_t request = control_.sync_request().load(); request > sync_served_) {
    const uint32_t unit = control_.sync_unit().load();
    return unit >= plan_.units.size() ||
           source_.CanStage(UnitSource::kSyncKeys + request, plan_.units[unit]);
  }
  if (!LoadSchedule()) return false;
  const uint64_t consumed = control_.consumed().load();
  const uint64_t use = std::max(next_use_, consumed);
  if (use >= consumed + plan_.ring_slots) return false;
  // A unit whose file read runs is not work yet: the read's end rings the doorbell.
  return WouldFit(use, consumed) &&
         source_.CanStage(use, plan_.units[worker_schedule_[use % worker_schedule_.size()]]);
}

uint64_t StreamSession::PlacementStart(uint64_t use) const {
  const uint64_t length = worker_schedule_.size();
  return use / length * packing_.cycle_bytes + packing_.starts[use % length];
}

uint64_t StreamSession::Span(uint64_t use) const {
  return plan_.units[worker_schedule_[use % worker_schedule_.size()]].span_bytes;
}

bool StreamSession::Blocks(const Placed& placed, uint64_t use, uint64_t end) const {
  return placed.use + plan_.ring_slots <= use || end - placed.start > packing_.arena_bytes;
}

bool StreamSession::WouldFit(uint64_t use, uint64_t consumed) const {
  const uint64_t end = PlacementStart(use) + Span(use);
  for (const Placed& oldest : placed_) {
    if (!Blocks(oldest, use, end)) return true;
    if (oldest.use >= consumed) return false;  // the runner has to move first
  }
  return true;
}

absl::StatusOr<StreamSession::Room> StreamSession::MakeRoom(uint64_t use, uint64_t consumed) {
  const uint64_t start = PlacementStart(use);
  const uint64_t end = start + Span(use);
  while (!placed_.empty()) {
    const Placed& oldest = placed_.front();
    if (!Blocks(oldest, use, end)) break;
    if (oldest.use >= consumed) return Room{Room::kWaitingOnRunner};
    // The runner published it is done with that use; its kernels may still be reading it.
    absl::StatusOr<bool> done = device_memory_->ConsumedDone(oldest.slot);
    if (!done.ok()) return done.status();
    if (!*done) return Room{Room::kWaitingOnDevice};
    placed_.pop_front();
  }
  return Room{Room::kFits, start};
}

bool StreamSession::LoadSchedule() {
  if (worker_schedule_.empty()) {
    absl::MutexLock lock(&mu_);
    if (schedule_.empty()) return false;
    worker_schedule_ = schedule_;
    std::vector<uint64_t> spans;
    for (uint32_t unit : worker_schedule_) spans.push_back(plan_.units[unit].span_bytes);
    packing_ = PackCycle(spans, plan_.arena_bytes);
  }
  return true;
}

StreamSession::StepResult StreamSession::Step() {
  if (stopped_.load() || plan_.units.empty()) return StepResult::kIdle;
  bool published = false;
  bool waiting = false;
  if (!PublishFinished(published, waiting)) return StepResult::kWorked;
  if (published) {
    if (control_.runner_waiting().load() != 0) runner_waits_.fetch_add(1);
    control_.WakeRunner();
  }
  if (std::optional<StepResult> served = ServeSyncRequest()) return *served;
  if (std::optional<StepResult> enqueued = EnqueueNextUse(waiting)) return *enqueued;
  if (published) return StepResult::kWorked;
  return waiting || !in_flight_.empty() ? StepResult::kWaitingOnDevice : StepResult::kIdle;
}

bool StreamSession::PublishFinished(bool& published, bool& waiting) {
  // In order: the runner never sees a slot before its bytes are all there, so its stream
  // needs no wait on ddod's events.
  while (!in_flight_.empty()) {
    absl::StatusOr<bool> done = device_memory_->ReadyDone(in_flight_.front().slot);
    if (!done.ok()) {
      Fail(done.status());
      return false;
    }
    if (!*done) {
      waiting = true;
      break;
    }
    const InFlight finished = in_flight_.front();
    in_flight_.pop_front();
    source_.Release(finished.staged);
    control_.slot_offset(finished.slot).store(finished.ring_offset);
    control_.slot_use(finished.slot).store(finished.use);
    control_.ready().store(finished.use + 1);
    produced_.fetch_add(1);
    published = true;
  }
  if (sync_in_flight_ == 0) return true;
  const uint32_t sync_slot = plan_.ring_slots;
  absl::StatusOr<bool> done = device_memory_->ReadyDone(sync_slot);
  if (!done.ok()) {
    Fail(done.status());
    return false;
  }
  if (!*done) {
    waiting = true;
    return true;
  }
  source_.Release(sync_staged_);
  sync_staged_ = {};
  control_.slot_use(sync_slot).store(sync_in_flight_);
  control_.sync_done().store(sync_in_flight_);
  sync_uses_.fetch_add(1);
  sync_in_flight_ = 0;
  published = true;
  return true;
}

std::optional<StreamSession::StepResult> StreamSession::ServeSyncRequest() {
  const uint64_t request = control_.sync_request().load();
  if (request <= sync_served_ || sync_in_flight_ != 0) return std::nullopt;
  const uint32_t sync_slot = plan_.ring_slots;
  const uint32_t unit = control_.sync_unit().load();
  const uint64_t key = UnitSource::kSyncKeys + request;
  if (unit >= plan_.units.size()) {
    Fail(absl::InvalidArgumentError(absl::StrCat("the runner asked for unit ", unit, " of ",
                                                 plan_.units.size())));
    return StepResult::kWorked;
  }
  absl::StatusOr<bool> free = device_memory_->ConsumedDone(sync_slot);
  if (!free.ok()) {
    Fail(free.status());
    return StepResult::kWorked;
  }
  if (!*free) return StepResult::kWaitingOnDevice;
  const CopyResult copied = CopyUnit(unit, sync_slot, plan_.arena_bytes, key, &sync_staged_);
  if (copied == CopyResult::kNotReady) return std::nullopt;  // its read's end wakes the worker
  if (copied == CopyResult::kFailed) return StepResult::kWorked;
  sync_served_ = request;
  sync_in_flight_ = request;
  return StepResult::kWorked;
}

std::optional<StreamSession::StepResult> StreamSession::EnqueueNextUse(bool& waiting) {
  // The next use of the schedule, unless the runner skipped past it.
  if (!LoadSchedule()) return std::nullopt;
  const uint64_t consumed = control_.consumed().load();
  const uint64_t use = std::max(next_use_, consumed);
  source_.DropBelow(use);  // reads of uses the runner skipped
  if (use >= consumed + plan_.ring_slots) {
    ReadAhead(use, consumed);
    return std::nullopt;
  }
  const uint32_t unit = worker_schedule_[use % worker_schedule_.size()];
  absl::StatusOr<Room> room = MakeRoom(use, consumed);
  if (!room.ok()) {
    Fail(room.status());
    return StepResult::kWorked;
  }
  if (room->state != Room::kFits) {
    if (room->state == Room::kWaitingOnDevice) waiting = true;
    ReadAhead(use, consumed);
    return std::nullopt;
  }
  const uint32_t slot = static_cast<uint32_t>(use % plan_.ring_slots);
  const uint64_t ring_offset = room->start % packing_.arena_bytes;
  UnitSource::Staged staged;
  const CopyResult copied = CopyUnit(unit, slot, ring_offset, use, &staged);
  if (copied == CopyResult::kNotReady) {
    ReadAhead(use + 1, consumed);
    return std::nullopt;  // its read's end, or a copy that frees a buffer, wakes the worker
  }
  if (copied == CopyResult::kFailed) return StepResult::kWorked;
  placed_.push_back({use, slot, room->start});
  in_flight_.push_back({use, slot, ring_offset, staged});
  next_use_ = use + 1;
  ReadAhead(next_use_, consumed);
  return StepResult::kWorked;
}

void StreamSession::ReadAhead(uint64_t from, uint64_t consumed) {
  if (!source_.reads_files() || worker_schedule_.empty()) return;
  const uint64_t end = consumed + plan_.ring_slots + source_.staging_buffers();
  for (uint64_t use = from; use < end; ++use) {
    const uint32_t unit = worker_schedule_[use % worker_schedule_.size()];
    if (!source_.Prefetch(use, plan_.units[unit], tensors_)) break;  // no buffer free
  }
}

StreamSession::CopyResult StreamSession::CopyUnit(uint32_t unit, uint32_t slot,
                                                  uint64_t ring_offset, uint64_t key,
                                                  UnitSource::Staged* staged) {
  const StreamUnit& planned = plan_.units[unit];
  absl::StatusOr<std::optional<UnitSource::Staged>> source =
      source_.Stage(key, planned, tensors_);
  if (!source.ok()) {
    Fail(source.status());
    return CopyResult::kFailed;
  }
  if (!source->has_value()) {
    if (key != last_wait_key_) staging_waits_.fetch_add(1);  // once per use that waited
    last_wait_key_ = key;
    return CopyResult::kNotReady;
  }
  *staged = **source;
  absl::Status copied = staged->buffer ? CopyImage(planned, staged->image, ring_offset)
                                       : CopyInPlace(planned, ring_offset);
  if (copied.ok()) copied = device_memory_->MarkReady(slot);
  if (!copied.ok()) {
    // Whatever the device still reads of the buffer, the session is over: nothing reuses it.
    Fail(copied);
    return CopyResult::kFailed;
  }
  file_bytes_read_.store(source_.file_bytes_read());
  streamed_bytes_.fetch_add(planned.tensor_bytes);
  streamed_units_.fetch_add(1);
  return CopyResult::kCopied;
}

absl::Status StreamSession::CopyInPlace(const StreamUnit& planned, uint64_t ring_offset) {
  for (const PlannedTensor& placed : planned.tensors) {
    const TensorEntry& tensor = tensors_[placed.table_index];
    DDO_RETURN_IF_ERROR(device_memory_->CopyToRing(ring_offset + placed.offset,
                                                   source_.host().DataOf(tensor),
                                                   tensor.byte_size));
  }
  return absl::OkStatus();
}

absl::Status StreamSession::CopyImage(const StreamUnit& planned, const char* image,
                                      uint64_t ring_offset) {
  // One copy from the first tensor's start to the last one's end (the gaps are padding).
  uint64_t begin = UINT64_MAX;
  uint64_t end = 0;
  for (const PlannedTensor& placed : planned.tensors) {
    const uint64_t bytes = tensors_[placed.table_index].byte_size;
    if (bytes == 0) continue;
    begin = std::min(begin, placed.offset);
    end = std::max(end, placed.offset + bytes);
  }
  if (end == 0) return absl::OkStatus();
  return device_memory_->CopyToRing(ring_offset + begin, image + begin, end - begin);
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
  stats.streamed_units = streamed_units_.load();
  stats.slab_bytes_filled = slab_bytes_filled_.load();
  stats.slab_was_warm = slab_was_warm_;
  stats.runner_waits = runner_waits_.load();
  stats.file_bytes_read = file_bytes_read_.load();
  stats.staging_bytes = source_.staging_bytes();
  stats.staging_waits = staging_waits_.load();
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
