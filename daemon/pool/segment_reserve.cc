// File: daemon/pool/segment_reserve.cc
#include "daemon/pool/segment_reserve.h"

#include <utility>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "daemon/common/format_bytes.h"
#include "daemon/common/logging.h"

namespace ddo {

SegmentReserve::SegmentReserve(HostPool& pool, SegmentReserveOptions options)
    : pool_(pool),
      target_(options.target_bytes == 0 ? 0 : HostPool::Footprint(options.target_bytes)),
      options_(options) {
  pool_.SetYielder(this);
}

SegmentReserve::~SegmentReserve() {
  std::shared_ptr<PoolSegment> dropped;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    if (making_ != nullptr) making_->Cancel();
    dropped = std::move(ready_);
    changed_.SignalAll();
  }
  if (thread_.joinable()) thread_.join();
  pool_.SetYielder(nullptr);
}

void SegmentReserve::Start() {
  absl::MutexLock lock(&mu_);
  if (started_ || target_ == 0) return;
  started_ = true;
  thread_ = std::thread([this] { Run(); });
}

std::shared_ptr<PoolSegment> SegmentReserve::Take(uint64_t bytes) {
  std::shared_ptr<PoolSegment> taken;
  {
    absl::MutexLock lock(&mu_);
    if (!WouldTakeLocked(bytes)) return nullptr;
    taken = std::move(ready_);
    not_before_ = absl::Now() + options_.refill_delay;
    changed_.SignalAll();
  }
  if (absl::Status cut = pool_.TakeFromReserve(*taken, bytes); !cut.ok()) {
    Logger("pool")->warn("the pre-faulted segment {} stays whole ({}): {}", taken->name(),
                         FormatBytes(taken->size()), cut.message());
  }
  return taken;
}

bool SegmentReserve::WouldTakeLocked(uint64_t bytes) const {
  // A small load gets a fresh segment: cutting the reserve for it would throw away most of
  // what was made, and a caller could keep ddod making reserves with loads that cost it little.
  return ready_ != nullptr && ready_->size() >= HostPool::Footprint(bytes) &&
         HostPool::Footprint(bytes) >= target_ / kSmallestShare;
}

uint64_t SegmentReserve::PinGridFor(uint64_t bytes) const {
  absl::MutexLock lock(&mu_);
  if (!WouldTakeLocked(bytes)) return 0;
  return ready_->pin_grid();
}

void SegmentReserve::Yield() {
  std::shared_ptr<PoolSegment> dropped;  // goes after the lock: unmapping it returns its bytes
  absl::MutexLock lock(&mu_);
  if (making_ != nullptr) making_->Cancel();
  // The thread clears making_ once the cancelled allocation has given its bytes back.
  mu_.Await(absl::Condition(
      +[](WorkProgress** making) { return *making == nullptr; }, &making_));
  dropped = std::move(ready_);
  not_before_ = absl::Now() + options_.refill_delay;
  changed_.SignalAll();
}

uint64_t SegmentReserve::ready_bytes() const {
  absl::MutexLock lock(&mu_);
  return ready_ == nullptr ? 0 : ready_->size();
}

bool SegmentReserve::ShouldMakeLocked() const {
  return !stopping_ && ready_ == nullptr && absl::Now() >= not_before_;
}

void SegmentReserve::Run() {
  absl::MutexLock lock(&mu_);
  while (!stopping_) {
    if (!ShouldMakeLocked()) {
      const absl::Duration wait = ready_ == nullptr ? not_before_ - absl::Now()
                                                    : absl::InfiniteDuration();
      changed_.WaitWithTimeout(&mu_, std::max(wait, absl::Milliseconds(10)));
      continue;
    }
    WorkProgress progress;
    making_ = &progress;
    mu_.Unlock();
    const absl::Time started = absl::Now();
    absl::StatusOr<std::shared_ptr<PoolSegment>> made = pool_.AllocateReserve(target_, &progress);
    const double seconds = absl::ToDoubleSeconds(absl::Now() - started);
    double pin_seconds = 0;
    if (made.ok() && (*made)->pool_pins()) {
      const absl::Time pinning = absl::Now();
      absl::Status pinned = pool_.PinReserve(**made, options_.pin_grid_bytes, &progress);
      pin_seconds = absl::ToDoubleSeconds(absl::Now() - pinning);
      // Unpinned parts are pinned by the taker, as any load's are.
      if (!pinned.ok() && !absl::IsCancelled(pinned)) {
        Logger("pool")->warn("pinning the pre-faulted reserve: {}", pinned.message());
      }
    }
    // Yielded while it was being made: its bytes go back here, before making_ is cleared, so
    // that the yield (which waits for that) returns with the room free. A yield that comes
    // after this finds the segment in ready_ and drops it itself.
    if (made.ok() && progress.cancelled()) made = absl::CancelledError("yielded");
    mu_.Lock();
    making_ = nullptr;
    if (made.ok() && !stopping_) {
      ready_ = *std::move(made);
      reported_no_room_ = false;
      Logger("pool")->info("pre-faulted reserve ready: {} in {:.2f} s{}", FormatBytes(target_),
                           seconds,
                           ready_->pinned() ? absl::StrFormat(", pinned in %.2f s", pin_seconds)
                                            : std::string());
    } else {
      if (!made.ok() && absl::IsResourceExhausted(made.status()) && !reported_no_room_) {
        reported_no_room_ = true;
        Logger("pool")->info("pre-faulted reserve waits for room: {}", made.status().message());
      } else if (!made.ok() && !absl::IsCancelled(made.status()) &&
                 !absl::IsResourceExhausted(made.status())) {
        Logger("pool")->warn("pre-faulted reserve: {}", made.status().message());
      }
      not_before_ = absl::Now() + options_.retry_interval;
      if (made.ok()) {  // made while ddod stops: it goes, outside the lock
        std::shared_ptr<PoolSegment> dropped = *std::move(made);
        mu_.Unlock();
        dropped.reset();
        mu_.Lock();
      }
    }
    changed_.SignalAll();
  }
}

}  // namespace ddo
