// File: daemon/stream/stream_sessions.cc
#include "daemon/stream/stream_sessions.h"

#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "daemon/common/format_bytes.h"
#include "daemon/common/logging.h"
#include "daemon/common/status_macros.h"

namespace ddo {

StreamSessions::StreamSessions(ComponentStore& store, SessionRegistry& registry, HostPool& pool,
                               GpuInventory gpus, StreamSessionsOptions options)
    : store_(store),
      registry_(registry),
      // The pool's prefix: a restarted ddod removes what a crashed one left.
      devices_(std::move(gpus), options, pool.name_prefix()),
      prefetcher_(store, devices_,
                  [this](const std::string& slab_key) { return SlabInUse(slab_key); }) {}

StreamSessions::~StreamSessions() { CloseAll(); }

absl::Status StreamSessions::CheckDevice(const std::string& device) const {
  return devices_.Resolve(device).status();
}

bool StreamSessions::SlabInUse(const std::string& slab_key) {
  absl::MutexLock lock(&mu_);
  for (const auto& [id, open] : sessions_) {
    if (open.slab_key == slab_key) return true;
  }
  return false;
}

void StreamSessions::Publish(std::shared_ptr<StreamSession> session, DeviceRoom room,
                             uid_t owner_uid, StreamWorker* worker) {
  {
    absl::MutexLock lock(&mu_);
    sessions_[session->id()] =
        OpenSession{session, std::move(room.slab_key), std::move(room.reservation), owner_uid};
    // The registry's record says where the session runs (SessionDirectory detaches by it).
    (void)registry_.MarkStreaming(session->id(), session->device());
  }
  worker->Add(std::move(session));
}

namespace {

// Where the session's host bytes come from, for the plan's explanation: the pool (pinned or
// not) or, for a file-tier component, its files (with the bytes per pass read from them).
void AddHostMemoryDecisions(const HostAttachment& attached, bool on_gpu,
                            uint32_t staging_buffers, SessionPlan* plan) {
  if (attached.bytes.files() != nullptr) {
    uint64_t file_bytes = 0;
    for (const StreamUnit& unit : plan->units) {
      for (const PlannedTensor& placed : unit.tensors) {
        if (attached.bytes.InFile(placed.table_index)) {
          file_bytes += attached.component.tensors[placed.table_index].byte_size;
        }
      }
    }
    plan->decisions.push_back({"file_bytes_per_pass", absl::StrCat(file_bytes),
                              absl::StrCat("of the ", plan->streamed_bytes,
                                           " bytes streamed per pass, read from backing files "
                                           "(S_file)")});
    plan->decisions.push_back(
        {"host_memory", attached.bytes.segments().empty() ? "backing files" : "pool and files",
         absl::StrCat("the component is on the file tier: each streamed unit in its files is ",
                      "read into one of ", staging_buffers, " staging buffers",
                      on_gpu ? " (pinned)" : "", ", then copied")});
  } else if (on_gpu && !attached.bytes.AllPinned()) {
    plan->decisions.push_back({"host_memory", "not pinned",
                              "copies from pageable memory are staged by the driver (slower)"});
  }
}

}  // namespace

absl::StatusOr<OpenedStream> StreamSessions::Open(const Lease& lease, HostAttachment attached,
                                                  const std::string& requested_device,
                                                  SessionPlan plan) {
  DDO_ASSIGN_OR_RETURN(StreamDevice device, devices_.Resolve(requested_device));
  const ComponentName name{attached.component.owner_uid, attached.component.cache_key,
                           attached.component.base_cache_key};
  AddHostMemoryDecisions(attached, device.ordinal >= 0, devices_.file_staging_buffers(), &plan);
  DDO_ASSIGN_OR_RETURN(DeviceRoom room, devices_.ReserveRoom(device, attached, plan));
  plan.decisions.push_back({"slab", room.slab_warm ? "warm" : "filled now",
                            room.slab_warm ? "a closed session of the same component and plan "
                                             "left it on the device (warm_process)"
                                           : "no warm slab of this component and plan"});
  SessionDeviceSpec spec{plan.ring_bytes(), plan.ring_slots, devices_.NewSegmentName('r')};
  DDO_ASSIGN_OR_RETURN(std::unique_ptr<SessionDevice> memory,
                       device.ordinal < 0 ? OpenHostSessionDevice(spec)
                                          : OpenCudaSessionDevice(device.ordinal, spec));
  DDO_ASSIGN_OR_RETURN(ControlBlock control,
                       ControlBlock::Create(devices_.NewSegmentName('c'), plan.ring_slots,
                                            static_cast<uint32_t>(plan.units.size()),
                                            plan.arena_bytes));
  DDO_ASSIGN_OR_RETURN(std::unique_ptr<StagingBuffers> staging,
                       StagingFor(attached.bytes, plan, devices_.file_staging_buffers(),
                                  /*pin=*/device.ordinal >= 0, devices_.host_pool()));
  DDO_ASSIGN_OR_RETURN(StreamWorker * worker, devices_.WorkerFor(device));
  FileReading reading;
  if (staging != nullptr) {
    reading = FileReading{std::move(staging), devices_.FileReaders(), [worker] { worker->Ring(); }};
  }
  auto session = std::make_shared<StreamSession>(
      attached.session_id, lease.id, name.cache_key, device.label, attached.component.tensors,
      attached.bytes, std::move(plan), room.slab, room.slab_warm, std::move(memory),
      std::move(control), std::move(reading));
  const absl::Time fill_start = absl::Now();
  DDO_RETURN_IF_ERROR(session->FillSlab());
  const double fill_seconds = absl::ToDoubleSeconds(absl::Now() - fill_start);
  const KnownSchedule known = memory_.Known(name, session->plan().signature);
  if (!known.order.empty()) (void)session->SetSchedule(known.order);

  OpenedStream opened;
  DDO_RETURN_IF_ERROR(session->device_memory().Export(&opened.memory));
  DDO_RETURN_IF_ERROR(session->slab()->Export(&opened.memory));
  const SessionPlan& placed = session->plan();
  opened.session_id = attached.session_id;
  opened.device = device.label;
  opened.plan = placed;
  opened.control_block_shm = session->control().name();
  opened.control_block_bytes = session->control().size();
  opened.doorbell_shm = worker->doorbell_name();
  opened.schedule = known.order;
  Logger("stream")->info(
      "session {} of '{}' on {}: slab {} {} in {:.3f} s, {} units streamed through a {} "
      "arena (up to {} in flight) + a {} out-of-schedule slot{}",
      session->id().substr(0, 8), name.cache_key, device.label, FormatBytes(placed.slab_bytes),
      room.slab_warm ? "warm" : "filled", fill_seconds, placed.units.size(),
      FormatBytes(placed.arena_bytes), placed.ring_slots, FormatBytes(placed.slot_bytes),
      known.order.empty() ? "" : known.from_base ? ", schedule known from its base"
                                                 : ", schedule known");
  Publish(std::move(session), std::move(room), name.owner_uid, worker);
  opened.component = std::move(attached.component);
  return opened;
}

absl::StatusOr<uint32_t> StreamSessions::SetSchedule(const std::string& session_id,
                                                     std::vector<uint32_t> schedule,
                                                     WeightRows rows) {
  std::shared_ptr<StreamSession> session;
  StreamWorker* worker = nullptr;
  uid_t owner_uid = 0;
  {
    absl::MutexLock lock(&mu_);
    auto it = sessions_.find(session_id);
    if (it == sessions_.end()) {
      return absl::NotFoundError(absl::StrCat("no streaming session '", session_id, "'"));
    }
    session = it->second.session;
    owner_uid = it->second.owner_uid;
    worker = devices_.FindWorker(session->device());
  }
  const uint32_t length = static_cast<uint32_t>(schedule.size());
  std::vector<uint32_t> copy = schedule;
  DDO_RETURN_IF_ERROR(session->SetSchedule(std::move(schedule)));
  const ComponentName name{owner_uid, session->cache_key(), ""};
  memory_.RememberSchedule(name, session->plan().signature, std::move(copy));
  memory_.RememberRows(name, session->tensors(), rows);
  worker->Ring();
  return length;
}

WeightRows StreamSessions::LearnedRows(uid_t owner_uid, const std::string& cache_key,
                                       const std::string& base_cache_key) const {
  return memory_.LearnedRows(ComponentName{owner_uid, cache_key, base_cache_key});
}

absl::Status StreamSessions::Detach(const std::string& session_id) {
  OpenSession open;
  {
    absl::MutexLock lock(&mu_);
    auto it = sessions_.find(session_id);
    if (it == sessions_.end()) {
      return absl::NotFoundError(absl::StrCat("no streaming session '", session_id, "'"));
    }
    open = std::move(it->second);
    sessions_.erase(it);
  }
  CloseSession(std::move(open), SessionState::kClosed);
  return absl::OkStatus();
}

namespace {

void AddTo(StreamTotals& totals, const StreamSessionStats& stats) {
  totals.sessions_opened += 1;
  totals.streamed_bytes += stats.streamed_bytes;
  totals.streamed_units += stats.streamed_units;
  totals.slab_bytes_filled += stats.slab_bytes_filled;
  (stats.slab_was_warm ? totals.warm_slab_hits : totals.warm_slab_misses) += 1;
  totals.runner_waits += stats.runner_waits;
  totals.file_bytes_read += stats.file_bytes_read;
  totals.staging_waits += stats.staging_waits;
}

}  // namespace

StreamTotals StreamSessions::Totals() {
  std::vector<std::shared_ptr<StreamSession>> open;
  StreamTotals totals;
  {
    absl::MutexLock lock(&mu_);
    totals = closed_totals_;
    for (const auto& [id, session] : sessions_) open.push_back(session.session);
  }
  for (const auto& session : open) AddTo(totals, session->Stats());
  // A session between leaving sessions_ and being counted as closed is in neither: never let
  // a counter go back (Prometheus would read it as a restart).
  absl::MutexLock lock(&mu_);
  for (auto [field, last] : {std::pair{&totals.sessions_opened, &last_totals_.sessions_opened},
                             {&totals.streamed_bytes, &last_totals_.streamed_bytes},
                             {&totals.streamed_units, &last_totals_.streamed_units},
                             {&totals.slab_bytes_filled, &last_totals_.slab_bytes_filled},
                             {&totals.warm_slab_hits, &last_totals_.warm_slab_hits},
                             {&totals.warm_slab_misses, &last_totals_.warm_slab_misses},
                             {&totals.runner_waits, &last_totals_.runner_waits},
                             {&totals.file_bytes_read, &last_totals_.file_bytes_read},
                             {&totals.staging_waits, &last_totals_.staging_waits}}) {
    *field = std::max(*field, *last);
    *last = *field;
  }
  return totals;
}

void StreamSessions::CloseSession(OpenSession open, SessionState state) {
  std::shared_ptr<StreamSession> session = std::move(open.session);
  if (StreamWorker* worker = devices_.FindWorker(session->device()); worker != nullptr) {
    worker->Remove(session->id());
  }
  session->Close(state);
  const StreamSessionStats final_stats = session->Stats();
  const std::string device = session->device();
  const std::string id = session->id();
  {
    absl::MutexLock lock(&mu_);
    AddTo(closed_totals_, final_stats);
  }
  const bool kept = devices_.ReturnRoom(
      ClosedRoom{device, std::move(open.slab_key), session->slab(), session->plan().slab_bytes,
                 session->cache_key(), open.owner_uid, final_stats.failed,
                 std::move(open.reservation)});
  session.reset();  // frees the ring, events and control block (the worker let go in Remove)
  (void)store_.Detach(id, DaemonCaller());
  Logger("stream")->info("session {} on {} closed{}", id.substr(0, 8), device,
                         kept ? "; its slab stays warm" : "");
}

void StreamSessions::ReleaseLease(const std::string& lease_id) {
  prefetcher_.CancelLease(lease_id);
  std::vector<OpenSession> closing;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = sessions_.begin(); it != sessions_.end();) {
      if (it->second.session->lease_id() == lease_id) {
        closing.push_back(std::move(it->second));
        it = sessions_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (OpenSession& open : closing) CloseSession(std::move(open), SessionState::kClosed);
}

void StreamSessions::CloseAll() {
  prefetcher_.StopPool();
  std::vector<OpenSession> closing;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [id, open] : sessions_) closing.push_back(std::move(open));
    sessions_.clear();
  }
  for (OpenSession& open : closing) CloseSession(std::move(open), SessionState::kClosed);
  devices_.Shutdown();  // the warm slabs, then the workers
}

std::vector<StreamSessionInfo> StreamSessions::List() {
  std::vector<std::shared_ptr<StreamSession>> sessions;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, open] : sessions_) sessions.push_back(open.session);
  }
  std::vector<StreamSessionInfo> infos;
  for (const auto& session : sessions) {
    StreamSessionInfo info;
    info.session_id = session->id();
    info.lease_id = session->lease_id();
    info.cache_key = session->cache_key();
    info.device = session->device();
    info.stats = session->Stats();
    info.ring_slots = session->plan().ring_slots;
    info.resident_bytes = session->plan().resident_bytes;
    info.device_bytes = session->plan().device_bytes();
    infos.push_back(std::move(info));
  }
  return infos;
}

}  // namespace ddo
