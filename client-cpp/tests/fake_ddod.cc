// File: client-cpp/tests/fake_ddod.cc
#include "client-cpp/tests/fake_ddod.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <stdexcept>
#include <utility>

#include "ddo/wire/futex.h"

namespace ddo::consumer {
namespace {

constexpr int64_t kWorkerSleepNs = 1'000'000;  // ddod's worker sleeps at most 1 ms

uint64_t RoundUpToPage(uint64_t bytes) { return (bytes + 4095) / 4096 * 4096; }

}  // namespace

SharedMapping::SharedMapping(uint64_t size) : size_(size) {
  void* data = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (data == MAP_FAILED) throw std::runtime_error("mmap of a shared test mapping failed");
  data_ = static_cast<uint8_t*>(data);
}

SharedMapping::~SharedMapping() { ::munmap(data_, size_); }

FakeDdod::FakeDdod(uint32_t slots, uint32_t units, uint64_t arena_bytes)
    : slots_(slots),
      arena_bytes_(arena_bytes),
      control_(RoundUpToPage(control_layout::LayoutBytes(slots))),
      doorbell_(doorbell_layout::kBytes) {
  // As ControlBlock::Create does: the header, every slot empty, the sync slot after the arena,
  // and the magic last.
  const ControlView view = control();
  view.version().store(control_layout::kVersion);
  view.slots_word().store(slots);
  view.units().store(units);
  view.daemon_pid().store(::getpid());
  view.arena_bytes().store(arena_bytes);
  for (uint32_t slot = 0; slot <= slots; ++slot) view.slot_use(slot).store(control_layout::kNoUse);
  view.slot_offset(slots).store(arena_bytes);
  view.magic().store(control_layout::kMagic);
  doorbell().magic().store(doorbell_layout::kMagic);
}

FakeDdod::~FakeDdod() { Stop(); }

void FakeDdod::Start() { worker_ = std::thread([this] { Run(); }); }

void FakeDdod::Stop() {
  if (!worker_.joinable()) return;
  stop_.store(true);
  FutexWakeAll(&doorbell().seq());
  worker_.join();
}

void FakeDdod::SetSchedule(std::vector<uint32_t> schedule) {
  std::lock_guard<std::mutex> lock(mutex_);
  schedule_ = std::move(schedule);
  next_use_ = 0;
  control().schedule_length().store(static_cast<uint32_t>(schedule_.size()));
}

void FakeDdod::SetState(SessionState state) {
  control().state().store(static_cast<uint32_t>(state));
  WakeRunner();
}

std::vector<uint32_t> FakeDdod::sync_units() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return sync_units_;
}

void FakeDdod::Run() {
  const ControlView view = control();
  const DoorbellView bell = doorbell();
  while (!stop_.load()) {
    bool worked = false;
    if (!paused_.load()) {
      worked = ServeRequest();
      worked = Produce() || worked;
    }
    if (worked) continue;
    // As Doorbell::Sleep: announce the sleep, then look for work once more.
    const uint32_t observed = bell.seq().load();
    bell.daemon_sleeping().store(1);
    bool pending = false;
    if (!paused_.load()) {
      std::lock_guard<std::mutex> lock(mutex_);
      const uint64_t consumed = view.consumed().load();
      pending = view.sync_request().load() > sync_served_ ||
                (!schedule_.empty() && std::max(next_use_, consumed) < consumed + slots_);
    }
    if (!pending && !stop_.load()) FutexWait(&bell.seq(), observed, kWorkerSleepNs);
    bell.daemon_sleeping().store(0);
  }
}

bool FakeDdod::ServeRequest() {
  const ControlView view = control();
  const uint64_t request = view.sync_request().load(std::memory_order_acquire);
  if (request <= sync_served_) return false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    sync_units_.push_back(view.sync_unit().load(std::memory_order_relaxed));
  }
  // slot_offset[K] never moves; slot_use[K] before sync_done.
  view.slot_use(slots_).store(wrong_slot_use_.load() ? request + 1000 : request);
  view.sync_done().store(request);
  sync_served_ = request;
  WakeRunner();
  return true;
}

bool FakeDdod::Produce() {
  const ControlView view = control();
  std::lock_guard<std::mutex> lock(mutex_);
  if (schedule_.empty()) return false;
  const uint64_t consumed = view.consumed().load(std::memory_order_acquire);
  const uint64_t use = std::max(next_use_, consumed);  // the runner may have skipped ahead
  if (use >= consumed + slots_) return false;          // K uses in flight: wait for the runner
  const uint32_t slot = static_cast<uint32_t>(use % slots_);
  view.slot_offset(slot).store(PlaceOf(use));
  view.slot_use(slot).store(wrong_slot_use_.load() ? use + 1000 : use);
  view.ready().store(use + 1);
  next_use_ = use + 1;
  produced_.store(use + 1);
  if (use + 1 - consumed > max_ahead_.load()) max_ahead_.store(use + 1 - consumed);
  WakeRunner();
  return true;
}

void FakeDdod::WakeRunner() {
  // As ControlBlock::WakeRunner: the counter's seq_cst store came first.
  const ControlView view = control();
  if (view.runner_waiting().load() != 0) {
    FutexWakeAll(LowWord(&view.ready()));
    FutexWakeAll(LowWord(&view.sync_done()));
  }
}

}  // namespace ddo::consumer
