// File: daemon/stream/stream_sessions.cc
#include "daemon/stream/stream_sessions.h"

#include <set>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "daemon/common/format_bytes.h"
#include "daemon/common/logging.h"
#include "daemon/common/random_id.h"
#include "daemon/common/status_macros.h"

namespace ddo {

StreamSessions::StreamSessions(ComponentStore& store, SessionRegistry& registry, HostPool& pool,
                               GpuInventory gpus, StreamSessionsOptions options)
    : store_(store), registry_(registry), pool_(pool), gpus_(std::move(gpus)), options_(options) {}

StreamSessions::~StreamSessions() { CloseAll(); }

std::string StreamSessions::NewSegmentName(char kind) const {
  // The pool's prefix: a restarted ddod removes what a crashed one left.
  return absl::StrCat(pool_.name_prefix(), std::string(1, kind), RandomId().substr(0, 15));
}

absl::StatusOr<StreamSessions::Device> StreamSessions::ResolveDevice(
    const std::string& requested) const {
  if (requested == "cpu" || requested == "cpu:0") return Device{"cpu", -1, options_.host_budget_bytes};
  if (int index = 0; absl::StartsWith(requested, "cpu:") &&
                     absl::SimpleAtoi(requested.substr(4), &index)) {
    if (index < 0 || index >= options_.host_devices) {
      return absl::NotFoundError(absl::StrCat(
          "ddod serves ", options_.host_devices, " host device(s) (cpu",
          options_.host_devices > 1 ? absl::StrCat(" to cpu:", options_.host_devices - 1) : "",
          "), not '", requested, "'; --host-devices sets how many"));
    }
    return Device{requested, -1, options_.host_budget_bytes};
  }
  if (gpus_.backend != ComputeBackend::kCuda) {
    return absl::UnavailableError(absl::StrCat("no usable GPU for device '", requested,
                                               "': ", gpus_.detail,
                                               "; device 'cpu' streams on the host backend"));
  }
  for (const GpuDevice& gpu : gpus_.devices) {
    int ordinal = -1;
    const bool by_ordinal = absl::StartsWith(requested, "cuda:") &&
                            absl::SimpleAtoi(requested.substr(5), &ordinal) &&
                            ordinal == gpu.ordinal;
    if (by_ordinal || absl::EqualsIgnoreCase(requested, gpu.uuid)) {
      uint64_t budget = options_.vram_budget_bytes;
      if (budget == 0 || budget > gpu.total_bytes) budget = gpu.total_bytes;
      return Device{gpu.uuid, gpu.ordinal, budget};
    }
  }
  std::string known;
  for (const GpuDevice& gpu : gpus_.devices) {
    absl::StrAppend(&known, known.empty() ? "" : ", ", "cuda:", gpu.ordinal, " ", gpu.uuid);
  }
  return absl::NotFoundError(absl::StrCat("ddod sees no device '", requested, "' (it has: ",
                                          known.empty() ? "none" : known, ", cpu)"));
}

absl::StatusOr<StreamWorker*> StreamSessions::WorkerFor(const Device& device) {
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(device.label);
  if (it == workers_.end()) {
    DDO_ASSIGN_OR_RETURN(std::unique_ptr<StreamWorker> worker,
                         StreamWorker::Start(device.label, NewSegmentName('b')));
    it = workers_.emplace(device.label, std::move(worker)).first;
  }
  return it->second.get();
}

absl::Status StreamSessions::CheckDevice(const std::string& device) const {
  return ResolveDevice(device).status();
}

absl::StatusOr<StreamSessions::DeviceRoom> StreamSessions::ReserveRoom(
    const Device& device, const HostAttachment& attached, const SessionPlan& plan) {
  const std::string bytes_identity =
      SlabBytesIdentity(attached.component.component_id, attached.component.segment_name);
  DeviceRoom room;
  room.slab_key = WarmSlabCache::Key(device.label, bytes_identity, plan.slab_signature);
  {
    std::vector<std::shared_ptr<ResidentSlab>> dropped;  // freed outside the lock
    absl::MutexLock lock(&mu_);
    uint64_t needed = plan.ring_bytes();
    if (std::optional<WarmSlab> warm = warm_.Take(room.slab_key)) {
      room.slab = std::move(warm->slab);
      room.reservation = std::move(warm->reservation);  // already reserved: now this session's
    } else {
      needed += plan.slab_bytes;
    }
    std::optional<DeviceBudget::Reservation> reserved;
    while (!(reserved = budget_.TryReserve(device.label, device.budget_bytes, needed)) &&
           DropWarmSlabLocked(device.label, /*spare_prefetched=*/false, &dropped)) {
    }
    if (!reserved) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "a session of '", attached.component.cache_key, "' needs ",
          FormatBytes(plan.device_bytes()), " on ", device.label, " (slab ",
          FormatBytes(plan.slab_bytes), " + ring ", FormatBytes(plan.ring_bytes()),
          "); ddod's budget there is ", FormatBytes(device.budget_bytes),
          " of which sessions hold ",
          FormatBytes(budget_.reserved(device.label) - room.reservation.bytes())));
    }
    room.reservation.Merge(*std::move(reserved));
    // Recipes are kept per uid, as the keys are (ComponentStore).
    warm_.Remember(absl::StrCat(attached.component.owner_uid, ":", attached.component.cache_key),
                   SlabRecipe{device.label, device.ordinal, device.budget_bytes, bytes_identity,
                              plan.slab_signature, plan.resident, plan.slab_bytes});
  }
  room.slab_warm = room.slab != nullptr;
  if (!room.slab_warm) {
    DDO_ASSIGN_OR_RETURN(std::unique_ptr<ResidentSlab> opened,
                         device.ordinal < 0 ? OpenHostSlab(NewSegmentName('s'), plan.slab_bytes)
                                            : OpenCudaSlab(device.ordinal, plan.slab_bytes));
    room.slab = std::move(opened);
  }
  return room;
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

absl::StatusOr<OpenedStream> StreamSessions::Open(const Lease& lease, HostAttachment attached,
                                                  const std::string& requested_device,
                                                  SessionPlan plan) {
  DDO_ASSIGN_OR_RETURN(Device device, ResolveDevice(requested_device));
  const ComponentName name{attached.component.owner_uid, attached.component.cache_key,
                           attached.component.base_cache_key};
  if (device.ordinal >= 0 && !attached.bytes.AllPinned()) {
    plan.decisions.push_back({"host_memory", "not pinned",
                              "copies from pageable memory are staged by the driver (slower)"});
  }
  DDO_ASSIGN_OR_RETURN(DeviceRoom room, ReserveRoom(device, attached, plan));
  plan.decisions.push_back({"slab", room.slab_warm ? "warm" : "filled now",
                            room.slab_warm ? "a closed session of the same component and plan "
                                             "left it on the device (warm_process)"
                                           : "no warm slab of this component and plan"});
  SessionDeviceSpec spec{plan.ring_bytes(), plan.ring_slots, NewSegmentName('r')};
  DDO_ASSIGN_OR_RETURN(std::unique_ptr<SessionDevice> memory,
                       device.ordinal < 0 ? OpenHostSessionDevice(spec)
                                          : OpenCudaSessionDevice(device.ordinal, spec));
  DDO_ASSIGN_OR_RETURN(ControlBlock control,
                       ControlBlock::Create(NewSegmentName('c'), plan.ring_slots,
                                            static_cast<uint32_t>(plan.units.size()),
                                            plan.arena_bytes));
  DDO_ASSIGN_OR_RETURN(StreamWorker * worker, WorkerFor(device));
  auto session = std::make_shared<StreamSession>(
      attached.session_id, lease.id, name.cache_key, device.label, attached.component.tensors,
      attached.bytes, std::move(plan), room.slab, room.slab_warm, std::move(memory),
      std::move(control));
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
    worker = workers_.at(session->device()).get();
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
                             {&totals.runner_waits, &last_totals_.runner_waits}}) {
    *field = std::max(*field, *last);
    *last = *field;
  }
  return totals;
}

void StreamSessions::CloseSession(OpenSession open, SessionState state) {
  std::shared_ptr<StreamSession> session = std::move(open.session);
  StreamWorker* worker = nullptr;
  {
    absl::MutexLock lock(&mu_);
    if (auto it = workers_.find(session->device()); it != workers_.end()) worker = it->second.get();
  }
  if (worker != nullptr) worker->Remove(session->id());
  session->Close(state);
  const StreamSessionStats final_stats = session->Stats();
  const std::string device = session->device();
  const std::string id = session->id();
  std::vector<std::shared_ptr<ResidentSlab>> dropped;  // freed outside the lock
  bool kept = false;
  {
    absl::MutexLock lock(&mu_);
    AddTo(closed_totals_, final_stats);
    // warm_process: the filled slab stays for the next runner with its share of the budget
    // (the ring's goes back), unless one is already kept under the key (two sessions of one
    // plan closed). One warm slab per device at most, the newest: VRAM held for nobody stays
    // bounded, since other processes on the GPU do not ask ddod's budget for room.
    if (options_.keep_slabs_warm && !final_stats.failed && !warm_.Contains(open.slab_key)) {
      // Slabs a Phase prefetched for coming sessions stay.
      while (DropWarmSlabLocked(device, /*spare_prefetched=*/true, &dropped)) {
      }
      WarmSlab warm{device, session->slab(),
                    open.reservation.Split(session->plan().slab_bytes), absl::Now(),
                    session->cache_key(), /*prefetched=*/false, open.owner_uid};
      kept = warm_.Put(open.slab_key, warm);
    }
  }
  open.reservation.Release();  // the ring's share, or all of it when the slab was not kept
  dropped.clear();
  session.reset();  // frees the ring, events and control block (the worker let go in Remove)
  (void)store_.Detach(id, DaemonCaller());
  Logger("stream")->info("session {} on {} closed{}", id.substr(0, 8), device,
                         kept ? "; its slab stays warm" : "");
}

bool StreamSessions::DropWarmSlabLocked(const std::string& device, bool spare_prefetched,
                                        std::vector<std::shared_ptr<ResidentSlab>>* dropped) {
  std::optional<WarmSlab> oldest = warm_.TakeOldest(device, spare_prefetched);
  if (!oldest) return false;
  Logger("stream")->info("dropping the warm slab of '{}' on {} ({}) for room", oldest->cache_key,
                         device, FormatBytes(oldest->reservation.bytes()));
  oldest->reservation.Release();
  dropped->push_back(std::move(oldest->slab));
  return true;
}

void StreamSessions::ReleaseLease(const std::string& lease_id) {
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
  std::vector<OpenSession> closing;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [id, open] : sessions_) closing.push_back(std::move(open));
    sessions_.clear();
  }
  for (OpenSession& open : closing) CloseSession(std::move(open), SessionState::kClosed);
  std::vector<WarmSlab> warm;
  {
    absl::MutexLock lock(&mu_);
    warm = warm_.TakeAll();
  }
  warm.clear();  // their memory and their reservations
  std::map<std::string, std::unique_ptr<StreamWorker>> workers;
  {
    absl::MutexLock lock(&mu_);
    workers.swap(workers_);
  }
  workers.clear();  // joins the threads
}

StreamSessions::PhaseResult StreamSessions::Phase(const Lease& lease,
                                                  const std::set<std::string>& keep,
                                                  const std::vector<std::string>& prefetch) {
  PhaseResult result;
  std::vector<WarmSlab> released;  // freed outside the lock
  {
    absl::MutexLock lock(&mu_);
    // A caller's phase releases only slabs of components it may read: another user's warm
    // slab is neither its to drop nor its to see named.
    released = warm_.TakeIf([&](const WarmSlab& warm) {
      return warm.owner_uid == lease.caller.uid && keep.count(warm.cache_key) == 0;
    });
  }
  for (const WarmSlab& warm : released) {
    result.released_bytes += warm.reservation.bytes();
    result.notes.push_back(absl::StrCat("released the warm slab of '", warm.cache_key, "' on ",
                                        warm.device, " (", FormatBytes(warm.reservation.bytes()),
                                        ")"));
  }
  released.clear();
  for (const std::string& key : prefetch) {
    result.notes.push_back(absl::StrCat("'", key, "': ", Prefetch(lease, key,
                                                                  &result.prefetched_bytes)));
  }
  return result;
}

std::string StreamSessions::Prefetch(const Lease& lease, const std::string& key,
                                     uint64_t* prefetched_bytes) {
  std::optional<SlabRecipe> recipe;
  {
    absl::MutexLock lock(&mu_);
    recipe = warm_.RecipeOf(absl::StrCat(lease.caller.uid, ":", key));
  }
  // An unknown key and one without a recipe answer alike: a phase tells nothing of the keys
  // it cannot use.
  constexpr char kNothing[] = "no earlier session of yours shows its placement";
  if (!recipe) return kNothing;
  absl::StatusOr<HostAttachment> attached = store_.AttachHost(lease, key);
  if (!attached.ok()) return kNothing;
  absl::Cleanup detach = [&] { (void)store_.Detach(attached->session_id, lease.caller); };
  if (SlabBytesIdentity(attached->component.component_id, attached->component.segment_name) !=
      recipe->bytes_identity) {
    return "registered again since its last session: nothing to prefetch";
  }
  const std::string slab_key =
      WarmSlabCache::Key(recipe->device, recipe->bytes_identity, recipe->slab_signature);
  std::optional<DeviceBudget::Reservation> reservation;
  {
    absl::MutexLock lock(&mu_);
    bool present = warm_.Contains(slab_key);
    for (const auto& [id, open] : sessions_) present = present || open.slab_key == slab_key;
    if (present) return absl::StrCat("its slab is already on ", recipe->device);
    reservation = budget_.TryReserve(recipe->device, recipe->device_budget_bytes,
                                     recipe->slab_bytes);
    if (!reservation) {
      return absl::StrCat("no room for its ", FormatBytes(recipe->slab_bytes), " slab on ",
                          recipe->device, " (ddod's budget ",
                          FormatBytes(recipe->device_budget_bytes), ", held ",
                          FormatBytes(budget_.reserved(recipe->device)), ")");
    }
  }
  absl::StatusOr<std::unique_ptr<ResidentSlab>> opened =
      recipe->ordinal < 0 ? OpenHostSlab(NewSegmentName('s'), recipe->slab_bytes)
                          : OpenCudaSlab(recipe->ordinal, recipe->slab_bytes);
  absl::Status filled = opened.ok() ? FillResidentSlab(**opened, recipe->resident,
                                                       attached->component.tensors,
                                                       attached->bytes)
                                    : opened.status();
  if (!filled.ok()) return absl::StrCat("prefetch failed: ", filled.message());
  WarmSlab warm{recipe->device, std::shared_ptr<ResidentSlab>(*std::move(opened)),
                *std::move(reservation), absl::Now(), key, /*prefetched=*/true,
                lease.caller.uid};
  {
    absl::MutexLock lock(&mu_);
    if (!warm_.Put(slab_key, warm)) {
      return absl::StrCat("its slab is already on ", recipe->device);  // a session left one
    }
  }
  *prefetched_bytes += recipe->slab_bytes;
  return absl::StrCat("prefetched its ", FormatBytes(recipe->slab_bytes), " slab on ",
                      recipe->device);
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

size_t StreamSessions::warm_slab_count() {
  absl::MutexLock lock(&mu_);
  return warm_.size();
}

}  // namespace ddo
