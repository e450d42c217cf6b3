// File: daemon/stream/device_table.cc
#include "daemon/stream/device_table.h"

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "daemon/common/format_bytes.h"
#include "daemon/common/logging.h"
#include "daemon/common/random_id.h"
#include "daemon/common/status_macros.h"

namespace ddo {

DeviceTable::DeviceTable(GpuInventory gpus, DeviceTableOptions options,
                         std::string segment_prefix)
    : gpus_(std::move(gpus)), options_(options), segment_prefix_(std::move(segment_prefix)) {}

std::string DeviceTable::NewSegmentName(char kind) const {
  return absl::StrCat(segment_prefix_, std::string(1, kind), RandomId().substr(0, 15));
}

namespace {

// For a host device: what the one RAM budget, shared with the pool, has left.
std::string RamBudgetNote(const HostPool* ram) {
  if (ram == nullptr) return "";
  const PoolUsage usage = ram->Usage();
  return absl::StrCat("; its bytes are RAM, counted in ddod's RAM budget of ",
                      FormatBytes(usage.budget_bytes), " with the host pool, which has ",
                      FormatBytes(usage.free_bytes()),
                      " free (raise --ram-budget-gb or evict components)");
}

}  // namespace

HostPool* DeviceTable::RamOf(const std::string& device_label) const {
  const bool host = device_label == "cpu" || absl::StartsWith(device_label, "cpu:");
  return host ? options_.host_pool : nullptr;
}

absl::StatusOr<StreamDevice> DeviceTable::Resolve(const std::string& requested) const {
  if (requested == "cpu" || requested == "cpu:0") {
    return StreamDevice{"cpu", -1, options_.host_budget_bytes};
  }
  if (int index = 0; absl::StartsWith(requested, "cpu:") &&
                     absl::SimpleAtoi(requested.substr(4), &index)) {
    if (index < 0 || index >= options_.host_devices) {
      return absl::NotFoundError(absl::StrCat(
          "ddod serves ", options_.host_devices, " host device(s) (cpu",
          options_.host_devices > 1 ? absl::StrCat(" to cpu:", options_.host_devices - 1) : "",
          "), not '", requested, "'; --host-devices sets how many"));
    }
    return StreamDevice{requested, -1, options_.host_budget_bytes};
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
      return StreamDevice{gpu.uuid, gpu.ordinal, budget};
    }
  }
  std::string known;
  for (const GpuDevice& gpu : gpus_.devices) {
    absl::StrAppend(&known, known.empty() ? "" : ", ", "cuda:", gpu.ordinal, " ", gpu.uuid);
  }
  return absl::NotFoundError(absl::StrCat("ddod sees no device '", requested, "' (it has: ",
                                          known.empty() ? "none" : known, ", cpu)"));
}

absl::StatusOr<StreamWorker*> DeviceTable::WorkerFor(const StreamDevice& device) {
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(device.label);
  if (it == workers_.end()) {
    DDO_ASSIGN_OR_RETURN(std::unique_ptr<StreamWorker> worker,
                         StreamWorker::Start(device.label, NewSegmentName('b')));
    it = workers_.emplace(device.label, std::move(worker)).first;
  }
  return it->second.get();
}

StreamWorker* DeviceTable::FindWorker(const std::string& label) {
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(label);
  return it == workers_.end() ? nullptr : it->second.get();
}

absl::StatusOr<std::unique_ptr<ResidentSlab>> DeviceTable::OpenSlab(int ordinal,
                                                                    uint64_t bytes) const {
  return ordinal < 0 ? OpenHostSlab(NewSegmentName('s'), bytes) : OpenCudaSlab(ordinal, bytes);
}

absl::StatusOr<DeviceRoom> DeviceTable::ReserveRoom(const StreamDevice& device,
                                                    const HostAttachment& attached,
                                                    const SessionPlan& plan) {
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
    while (!(reserved = budget_.TryReserve(device.label, device.budget_bytes, needed,
                                                  RamOf(device.label))) &&
           DropWarmSlabLocked(device.label, /*spare_prefetched=*/false, &dropped)) {
    }
    if (!reserved) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "a session of '", attached.component.cache_key, "' needs ",
          FormatBytes(plan.device_bytes()), " on ", device.label, " (slab ",
          FormatBytes(plan.slab_bytes), " + ring ", FormatBytes(plan.ring_bytes()),
          "); ddod's budget there is ", FormatBytes(device.budget_bytes),
          " of which sessions hold ",
          FormatBytes(budget_.reserved(device.label) - room.reservation.bytes()),
          RamBudgetNote(RamOf(device.label))));
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
                         OpenSlab(device.ordinal, plan.slab_bytes));
    room.slab = std::move(opened);
  }
  return room;
}

bool DeviceTable::ReturnRoom(ClosedRoom closed) {
  std::vector<std::shared_ptr<ResidentSlab>> dropped;  // freed outside the lock, last
  bool kept = false;
  {
    absl::MutexLock lock(&mu_);
    // warm_process: the filled slab stays for the next runner with its share of the budget
    // (the ring's goes back), unless one is already kept under the key (two sessions of one
    // plan closed). One warm slab per device at most, the newest: VRAM held for nobody stays
    // bounded, since other processes on the GPU do not ask ddod's budget for room.
    if (options_.keep_slabs_warm && !closed.failed && !warm_.Contains(closed.slab_key)) {
      // Slabs a Phase prefetched for coming sessions stay.
      while (DropWarmSlabLocked(closed.device, /*spare_prefetched=*/true, &dropped)) {
      }
      WarmSlab warm{closed.device, closed.slab, closed.reservation.Split(closed.slab_bytes),
                    absl::Now(), closed.cache_key, /*prefetched=*/false, closed.owner_uid};
      kept = warm_.Put(closed.slab_key, warm);
    }
  }
  closed.reservation.Release();  // the ring's share, or all of it when the slab was not kept
  return kept;
}

bool DeviceTable::DropWarmSlabLocked(const std::string& device, bool spare_prefetched,
                                     std::vector<std::shared_ptr<ResidentSlab>>* dropped) {
  std::optional<WarmSlab> oldest = warm_.TakeOldest(device, spare_prefetched);
  if (!oldest) return false;
  Logger("stream")->info("dropping the warm slab of '{}' on {} ({}) for room", oldest->cache_key,
                         device, FormatBytes(oldest->reservation.bytes()));
  oldest->reservation.Release();
  dropped->push_back(std::move(oldest->slab));
  return true;
}

std::vector<WarmSlab> DeviceTable::TakeWarmIf(
    const std::function<bool(const WarmSlab&)>& which) {
  absl::MutexLock lock(&mu_);
  return warm_.TakeIf(which);
}

std::optional<SlabRecipe> DeviceTable::RecipeOf(const std::string& recipe_key) const {
  absl::MutexLock lock(&mu_);
  return warm_.RecipeOf(recipe_key);
}

bool DeviceTable::HasWarm(const std::string& slab_key) const {
  absl::MutexLock lock(&mu_);
  return warm_.Contains(slab_key);
}

bool DeviceTable::PutWarm(const std::string& slab_key, WarmSlab& slab) {
  absl::MutexLock lock(&mu_);
  return warm_.Put(slab_key, slab);
}

size_t DeviceTable::warm_slab_count() const {
  absl::MutexLock lock(&mu_);
  return warm_.size();
}

FileReadPool* DeviceTable::FileReaders() {
  absl::MutexLock lock(&mu_);
  if (file_readers_ == nullptr) {
    file_readers_ = std::make_unique<FileReadPool>(
        options_.file_read_threads > 0 ? options_.file_read_threads : DefaultFileReadThreads());
  }
  return file_readers_.get();
}

void DeviceTable::Shutdown() {
  std::unique_ptr<FileReadPool> readers;
  {
    absl::MutexLock lock(&mu_);
    readers.swap(file_readers_);
  }
  readers.reset();  // joins the read threads: no read rings a worker's doorbell after this
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

}  // namespace ddo
