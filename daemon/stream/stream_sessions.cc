// File: daemon/stream/stream_sessions.cc
#include "daemon/stream/stream_sessions.h"

#include <unistd.h>

#include <set>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "daemon/common/format_bytes.h"
#include "daemon/common/logging.h"
#include "daemon/common/status_macros.h"

namespace ddo {
namespace {

void PlanToProto(const SessionPlan& plan, ddo::v1::PlanExplanation* out) {
  out->set_route("ddo_stream");
  out->set_resident_bytes(plan.resident_bytes);
  out->set_streamed_bytes(plan.streamed_bytes);
  out->set_ring_slots(plan.ring_slots);
  for (const PlanDecisionEntry& entry : plan.decisions) {
    auto* decision = out->add_decisions();
    decision->set_key(entry.key);
    decision->set_value(entry.value);
    decision->set_reason(entry.reason);
  }
}

// Which bytes a slab was filled from: the component (a derived version is another component
// than its base, even where the resident tensors are unchanged) and its own segment (a key
// registered again gets a new one).
std::string BytesIdentity(const ComponentSnapshot& component) {
  return absl::StrCat(component.component_id, "/", component.segment_name);
}

}  // namespace

StreamSessions::StreamSessions(ComponentStore& store, HostPool& pool, GpuInventory gpus,
                               StreamSessionsOptions options)
    : store_(store), pool_(pool), gpus_(std::move(gpus)), options_(options) {}

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

absl::StatusOr<ComponentSnapshot> StreamSessions::Open(const Lease& lease,
                                                       const ddo::v1::AttachRequest& request,
                                                       const ResidentPolicy& resident_policy,
                                                       ddo::v1::AttachResponse* response) {
  DDO_ASSIGN_OR_RETURN(Device device, ResolveDevice(request.device_uuid()));
  std::map<std::string, std::string> values(request.settings().begin(), request.settings().end());
  DDO_ASSIGN_OR_RETURN(StreamSettings settings, ParseStreamSettings(values));
  const std::set<std::string> streamable(request.streamable().begin(), request.streamable().end());

  DDO_ASSIGN_OR_RETURN(HostAttachment attached, store_.AttachHost(lease, request.cache_key()));
  // From here on, every failure gives the component back.
  auto fail = [&](absl::Status status) -> absl::Status {
    (void)store_.Detach(attached.session_id, lease.caller);
    return status;
  };
  std::vector<PlanDecisionEntry> policy_decisions;
  if (resident_policy) {
    resident_policy(attached.component.tensors, streamable, values, &settings, &policy_decisions);
  }
  absl::StatusOr<SessionPlan> plan =
      PlanSession(attached.component.tensors, streamable, settings);
  if (!plan.ok()) return fail(plan.status());
  plan->decisions.insert(plan->decisions.begin(), policy_decisions.begin(), policy_decisions.end());
  if (device.ordinal >= 0 && !attached.bytes.AllPinned()) {
    plan->decisions.push_back({"host_memory", "not pinned",
                               "copies from pageable memory are staged by the driver (slower)"});
  }

  // A warm slab of the same component bytes and placement, or room for a new one: reserved
  // under ddod's budget before anything is allocated. Warm slabs give way, least recently
  // used first, when a session needs their room.
  const std::string bytes_identity = BytesIdentity(attached.component);
  const std::string slab_key =
      absl::StrCat(device.label, "|", bytes_identity, "|", plan->slab_signature);
  std::shared_ptr<ResidentSlab> slab;
  uint64_t reserved_here = 0;  // what this session holds in reserved_ when it opens
  {
    std::vector<std::shared_ptr<ResidentSlab>> dropped;  // freed outside the lock
    absl::MutexLock lock(&mu_);
    uint64_t needed = plan->ring_bytes();
    if (auto warm = warm_slabs_.find(slab_key); warm != warm_slabs_.end()) {
      slab = std::move(warm->second.slab);
      reserved_here += warm->second.bytes;  // already reserved: now this session's
      warm_slabs_.erase(warm);
    } else {
      needed += plan->slab_bytes;
    }
    uint64_t& reserved = reserved_[device.label];
    while (device.budget_bytes != 0 && reserved + needed > device.budget_bytes &&
           DropWarmSlabLocked(device.label, &dropped)) {
    }
    if (device.budget_bytes != 0 && reserved + needed > device.budget_bytes) {
      reserved -= reserved_here;
      return fail(absl::ResourceExhaustedError(absl::StrCat(
          "a session of '", request.cache_key(), "' needs ", FormatBytes(plan->device_bytes()),
          " on ", device.label, " (slab ", FormatBytes(plan->slab_bytes), " + ring ",
          FormatBytes(plan->ring_bytes()), "); ddod's budget there is ",
          FormatBytes(device.budget_bytes), " of which sessions hold ",
          FormatBytes(reserved - reserved_here))));
    }
    reserved += needed;
    reserved_here += needed;
    last_slabs_[request.cache_key()] = SlabRecipe{device, bytes_identity,
                                                  plan->slab_signature, plan->resident,
                                                  plan->slab_bytes};
  }
  auto unreserve = [&] {
    absl::MutexLock lock(&mu_);
    reserved_[device.label] -= reserved_here;
  };
  const bool slab_warm = slab != nullptr;
  if (!slab_warm) {
    absl::StatusOr<std::unique_ptr<ResidentSlab>> opened =
        device.ordinal < 0 ? OpenHostSlab(NewSegmentName('s'), plan->slab_bytes)
                           : OpenCudaSlab(device.ordinal, plan->slab_bytes);
    if (!opened.ok()) {
      unreserve();
      return fail(opened.status());
    }
    slab = *std::move(opened);
  }
  plan->decisions.push_back({"slab", slab_warm ? "warm" : "filled now",
                             slab_warm ? "a closed session of the same component and plan left it "
                                         "on the device (warm_process)"
                                       : "no warm slab of this component and plan"});

  SessionDeviceSpec spec;
  spec.ring_bytes = plan->ring_bytes();
  spec.ring_slots = plan->ring_slots;
  spec.ring_segment_name = NewSegmentName('r');
  absl::StatusOr<std::unique_ptr<SessionDevice>> memory =
      device.ordinal < 0 ? OpenHostSessionDevice(spec) : OpenCudaSessionDevice(device.ordinal, spec);
  if (!memory.ok()) {
    unreserve();
    return fail(memory.status());
  }
  absl::StatusOr<ControlBlock> control = ControlBlock::Create(
      NewSegmentName('c'), plan->ring_slots, static_cast<uint32_t>(plan->units.size()),
      plan->arena_bytes);
  if (!control.ok()) {
    unreserve();
    return fail(control.status());
  }
  absl::StatusOr<StreamWorker*> worker = WorkerFor(device);
  if (!worker.ok()) {
    unreserve();
    return fail(worker.status());
  }

  auto session = std::make_shared<StreamSession>(
      attached.session_id, lease.id, request.cache_key(), device.label,
      attached.component.tensors, attached.bytes, *std::move(plan), slab, slab_warm,
      *std::move(memory), *std::move(control));
  const absl::Time fill_start = absl::Now();
  if (absl::Status filled = session->FillSlab(); !filled.ok()) {
    session.reset();
    unreserve();
    return fail(filled);
  }
  const double fill_seconds = absl::ToDoubleSeconds(absl::Now() - fill_start);

  const std::string schedule_key = absl::StrCat(request.cache_key(), "/", session->plan().signature);
  std::vector<uint32_t> known;
  bool known_from_base = false;
  {
    absl::MutexLock lock(&mu_);
    if (auto it = known_schedules_.find(schedule_key); it != known_schedules_.end()) {
      known = it->second;
    } else if (!attached.component.base_cache_key.empty()) {
      // A derived version has its root base's units: the base's runners learned its order.
      const std::string base_key = absl::StrCat(attached.component.base_cache_key, "/",
                                                session->plan().signature);
      if (auto base = known_schedules_.find(base_key); base != known_schedules_.end()) {
        known = base->second;
        known_from_base = true;
      }
    }
  }
  if (!known.empty()) (void)session->SetSchedule(known);

  // The response.
  ddo::v1::DeviceResources* resources = response->mutable_device();
  absl::Status exported = session->device_memory().Export(resources);
  if (exported.ok()) exported = session->slab()->Export(resources);
  if (!exported.ok()) {
    session.reset();
    unreserve();
    return fail(exported);
  }
  const SessionPlan& placed = session->plan();
  resources->set_device_uuid(device.label);
  resources->set_resident_slab_bytes(placed.slab_bytes);
  for (const PlannedTensor& tensor : placed.resident) {
    auto* out = resources->add_resident();
    out->set_name(attached.component.tensors[tensor.table_index].name);
    out->set_offset(tensor.offset);
    out->set_byte_size(attached.component.tensors[tensor.table_index].byte_size);
  }
  resources->set_ring_slots(placed.ring_slots);
  resources->set_ring_slot_bytes(placed.slot_bytes);
  resources->set_ring_arena_bytes(placed.arena_bytes);
  resources->set_control_block_shm(session->control().name());
  resources->set_control_block_bytes(session->control().size());
  resources->set_daemon_pid(::getpid());
  for (uint32_t u = 0; u < placed.units.size(); ++u) {
    const StreamUnit& unit = placed.units[u];
    auto* out = resources->add_units();
    out->set_unit(u);
    out->set_name(unit.name);
    out->set_byte_size(unit.span_bytes);
    for (const PlannedTensor& tensor : unit.tensors) {
      auto* placement = out->add_tensors();
      placement->set_name(attached.component.tensors[tensor.table_index].name);
      placement->set_offset(tensor.offset);
      placement->set_byte_size(attached.component.tensors[tensor.table_index].byte_size);
    }
  }
  PlanToProto(placed, response->mutable_plan());
  for (uint32_t unit : known) response->add_schedule(unit);
  response->set_session_id(attached.session_id);

  StreamWorker* device_worker = *worker;
  resources->set_doorbell_shm(device_worker->doorbell_name());
  {
    absl::MutexLock lock(&mu_);
    sessions_[session->id()] = session;
    slab_keys_[session->id()] = slab_key;
  }
  device_worker->Add(session);
  Logger("stream")->info(
      "session {} of '{}' on {}: slab {} {} in {:.3f} s, {} units streamed through a {} "
      "arena (up to {} in flight) + a {} out-of-schedule slot{}",
      session->id().substr(0, 8), request.cache_key(), device.label, FormatBytes(placed.slab_bytes),
      slab_warm ? "warm" : "filled", fill_seconds, placed.units.size(),
      FormatBytes(placed.arena_bytes), placed.ring_slots, FormatBytes(placed.slot_bytes),
      known.empty() ? "" : known_from_base ? ", schedule known from its base" : ", schedule known");
  return attached.component;
}

absl::StatusOr<uint32_t> StreamSessions::SetSchedule(const std::string& session_id,
                                                     std::vector<uint32_t> schedule) {
  std::shared_ptr<StreamSession> session;
  StreamWorker* worker = nullptr;
  {
    absl::MutexLock lock(&mu_);
    auto it = sessions_.find(session_id);
    if (it == sessions_.end()) {
      return absl::NotFoundError(absl::StrCat("no streaming session '", session_id, "'"));
    }
    session = it->second;
    worker = workers_.at(session->device()).get();
  }
  const uint32_t length = static_cast<uint32_t>(schedule.size());
  std::vector<uint32_t> copy = schedule;
  DDO_RETURN_IF_ERROR(session->SetSchedule(std::move(schedule)));
  {
    absl::MutexLock lock(&mu_);
    known_schedules_[absl::StrCat(session->cache_key(), "/", session->plan().signature)] =
        std::move(copy);
  }
  worker->Ring();
  return length;
}

bool StreamSessions::Owns(const std::string& session_id) {
  absl::MutexLock lock(&mu_);
  return sessions_.count(session_id) != 0;
}

absl::Status StreamSessions::Detach(const std::string& session_id) {
  std::shared_ptr<StreamSession> session;
  {
    absl::MutexLock lock(&mu_);
    auto it = sessions_.find(session_id);
    if (it == sessions_.end()) {
      return absl::NotFoundError(absl::StrCat("no streaming session '", session_id, "'"));
    }
    session = std::move(it->second);
    sessions_.erase(it);
  }
  CloseSession(std::move(session), SessionState::kClosed);
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
    for (const auto& [id, session] : sessions_) open.push_back(session);
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

void StreamSessions::CloseSession(std::shared_ptr<StreamSession> session, SessionState state) {
  StreamWorker* worker = nullptr;
  {
    absl::MutexLock lock(&mu_);
    if (auto it = workers_.find(session->device()); it != workers_.end()) worker = it->second.get();
  }
  if (worker != nullptr) worker->Remove(session->id());
  session->Close(state);
  {
    const StreamSessionStats final_stats = session->Stats();
    absl::MutexLock lock(&mu_);
    AddTo(closed_totals_, final_stats);
  }
  const SessionPlan& plan = session->plan();
  const std::string device = session->device();
  const std::string id = session->id();
  const bool failed = session->Stats().failed;
  std::shared_ptr<ResidentSlab> slab = session->slab();
  std::vector<std::shared_ptr<ResidentSlab>> dropped;  // freed outside the lock
  bool kept = false;
  {
    absl::MutexLock lock(&mu_);
    std::string slab_key;
    if (auto key = slab_keys_.find(id); key != slab_keys_.end()) {
      slab_key = key->second;
      slab_keys_.erase(key);
    }
    // warm_process: the filled slab stays for the next runner (its bytes stay reserved),
    // unless one is already kept under the key (two sessions of one plan closed). One warm
    // slab per device at most, the newest: VRAM held for nobody stays bounded, since other
    // processes on the GPU do not ask ddod's budget for room.
    if (options_.keep_slabs_warm && !failed && !slab_key.empty() && warm_slabs_.count(slab_key) == 0) {
      // Slabs a Phase prefetched for coming sessions stay.
      while (DropWarmSlabLocked(device, &dropped, /*spare_prefetched=*/true)) {
      }
      warm_slabs_[slab_key] =
          WarmSlab{device, slab, plan.slab_bytes, absl::Now(), session->cache_key(), false};
      reserved_[device] -= plan.ring_bytes();
      kept = true;
    } else {
      reserved_[device] -= plan.device_bytes();
    }
  }
  dropped.clear();
  slab.reset();
  session.reset();  // frees the ring, events and control block (the worker let go in Remove)
  (void)store_.Detach(id, DaemonCaller());
  Logger("stream")->info("session {} on {} closed{}", id.substr(0, 8), device,
                         kept ? "; its slab stays warm" : "");
}

bool StreamSessions::DropWarmSlabLocked(const std::string& device,
                                        std::vector<std::shared_ptr<ResidentSlab>>* dropped,
                                        bool spare_prefetched) {
  auto oldest = warm_slabs_.end();
  for (auto it = warm_slabs_.begin(); it != warm_slabs_.end(); ++it) {
    if (it->second.device != device || (spare_prefetched && it->second.prefetched)) continue;
    if (oldest == warm_slabs_.end() || it->second.last_used < oldest->second.last_used) oldest = it;
  }
  if (oldest == warm_slabs_.end()) return false;
  Logger("stream")->info("dropping the warm slab {} ({}) for room", oldest->first,
                         FormatBytes(oldest->second.bytes));
  reserved_[device] -= oldest->second.bytes;
  dropped->push_back(std::move(oldest->second.slab));
  warm_slabs_.erase(oldest);
  return true;
}

void StreamSessions::ReleaseLease(const std::string& lease_id) {
  std::vector<std::shared_ptr<StreamSession>> closing;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = sessions_.begin(); it != sessions_.end();) {
      if (it->second->lease_id() == lease_id) {
        closing.push_back(std::move(it->second));
        it = sessions_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& session : closing) CloseSession(std::move(session), SessionState::kClosed);
}

void StreamSessions::CloseAll() {
  std::vector<std::shared_ptr<StreamSession>> closing;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [id, session] : sessions_) closing.push_back(std::move(session));
    sessions_.clear();
  }
  for (auto& session : closing) CloseSession(std::move(session), SessionState::kClosed);
  std::map<std::string, WarmSlab> warm;
  {
    absl::MutexLock lock(&mu_);
    warm.swap(warm_slabs_);
    for (const auto& [key, slab] : warm) reserved_[slab.device] -= slab.bytes;
  }
  warm.clear();
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
  std::vector<std::shared_ptr<ResidentSlab>> dropped;  // freed outside the lock
  {
    absl::MutexLock lock(&mu_);
    for (auto it = warm_slabs_.begin(); it != warm_slabs_.end();) {
      // A caller's phase releases only slabs of components it may read: another user's warm
      // slab is neither its to drop nor its to see named.
      if (keep.count(it->second.cache_key) ||
          !store_.MayRead(it->second.cache_key, lease.caller)) {
        ++it;
        continue;
      }
      result.released_bytes += it->second.bytes;
      result.notes.push_back(absl::StrCat("released the warm slab of '", it->second.cache_key,
                                          "' on ", it->second.device, " (",
                                          FormatBytes(it->second.bytes), ")"));
      reserved_[it->second.device] -= it->second.bytes;
      dropped.push_back(std::move(it->second.slab));
      it = warm_slabs_.erase(it);
    }
  }
  dropped.clear();

  for (const std::string& key : prefetch) {
    SlabRecipe recipe;
    {
      absl::MutexLock lock(&mu_);
      auto found = last_slabs_.find(key);
      if (found == last_slabs_.end()) {
        result.notes.push_back(absl::StrCat("'", key, "': no earlier session shows its placement"));
        continue;
      }
      recipe = found->second;
    }
    absl::StatusOr<HostAttachment> attached = store_.AttachHost(lease, key);
    if (!attached.ok()) {
      result.notes.push_back(absl::StrCat("'", key, "': ", attached.status().message()));
      continue;
    }
    auto note = [&](std::string text) {
      result.notes.push_back(absl::StrCat("'", key, "': ", text));
      (void)store_.Detach(attached->session_id, lease.caller);
    };
    if (BytesIdentity(attached->component) != recipe.bytes_identity) {
      note("registered again since its last session: nothing to prefetch");
      continue;
    }
    const std::string slab_key =
        absl::StrCat(recipe.device.label, "|", recipe.bytes_identity, "|", recipe.slab_signature);
    {
      absl::MutexLock lock(&mu_);
      bool present = warm_slabs_.count(slab_key) > 0;
      for (const auto& [id, open_key] : slab_keys_) present = present || open_key == slab_key;
      if (present) {
        note(absl::StrCat("its slab is already on ", recipe.device.label));
        continue;
      }
      uint64_t& reserved = reserved_[recipe.device.label];
      if (recipe.device.budget_bytes != 0 &&
          reserved + recipe.slab_bytes > recipe.device.budget_bytes) {
        note(absl::StrCat("no room for its ", FormatBytes(recipe.slab_bytes), " slab on ",
                          recipe.device.label, " (ddod's budget ",
                          FormatBytes(recipe.device.budget_bytes), ", held ",
                          FormatBytes(reserved), ")"));
        continue;
      }
      reserved += recipe.slab_bytes;
    }
    absl::StatusOr<std::unique_ptr<ResidentSlab>> opened =
        recipe.device.ordinal < 0 ? OpenHostSlab(NewSegmentName('s'), recipe.slab_bytes)
                                  : OpenCudaSlab(recipe.device.ordinal, recipe.slab_bytes);
    absl::Status filled = opened.ok() ? FillResidentSlab(**opened, recipe.resident,
                                                         attached->component.tensors,
                                                         attached->bytes)
                                      : opened.status();
    if (!filled.ok()) {
      {
        absl::MutexLock lock(&mu_);
        reserved_[recipe.device.label] -= recipe.slab_bytes;
      }
      note(absl::StrCat("prefetch failed: ", filled.message()));
      continue;
    }
    {
      absl::MutexLock lock(&mu_);
      warm_slabs_[slab_key] = WarmSlab{recipe.device.label, std::shared_ptr<ResidentSlab>(*std::move(opened)),
                                       recipe.slab_bytes, absl::Now(), key, true};
    }
    result.prefetched_bytes += recipe.slab_bytes;
    note(absl::StrCat("prefetched its ", FormatBytes(recipe.slab_bytes), " slab on ",
                      recipe.device.label));
  }
  return result;
}

std::vector<StreamSessionInfo> StreamSessions::List() {
  std::vector<std::shared_ptr<StreamSession>> sessions;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, session] : sessions_) sessions.push_back(session);
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
  return warm_slabs_.size();
}

}  // namespace ddo
