#include "daemon/stream/device_budget.h"

#include <algorithm>
#include <cassert>
#include <utility>

namespace ddo {

DeviceBudget::Reservation& DeviceBudget::Reservation::operator=(Reservation&& other) noexcept {
  if (this != &other) {
    Release();
    budget_ = std::exchange(other.budget_, nullptr);
    device_ = std::move(other.device_);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

DeviceBudget::Reservation DeviceBudget::Reservation::Split(uint64_t bytes) {
  const uint64_t moved = std::min(bytes, bytes_);
  bytes_ -= moved;
  return Reservation(budget_, device_, moved);
}

void DeviceBudget::Reservation::Merge(Reservation other) {
  if (other.budget_ == nullptr) return;
  if (budget_ == nullptr) {
    *this = std::move(other);
    return;
  }
  // Both hold bytes of one budget and device (the callers' invariant): one sum, one release.
  assert(other.budget_ == budget_ && other.device_ == device_);
  bytes_ += std::exchange(other.bytes_, 0);
  other.budget_ = nullptr;
}

void DeviceBudget::Reservation::Release() {
  if (budget_ != nullptr && bytes_ > 0) budget_->GiveBack(device_, bytes_);
  budget_ = nullptr;
  bytes_ = 0;
}

std::optional<DeviceBudget::Reservation> DeviceBudget::TryReserve(const std::string& device,
                                                                  uint64_t limit_bytes,
                                                                  uint64_t bytes, HostPool* ram) {
  absl::MutexLock lock(&mu_);
  Device& totals = devices_[device];
  if (limit_bytes != 0 && (bytes > limit_bytes || totals.reserved > limit_bytes - bytes)) {
    return std::nullopt;
  }
  if (ram != nullptr && !ram->TryHold(bytes)) return std::nullopt;
  totals.ram = ram;
  totals.reserved += bytes;
  return Reservation(this, device, bytes);
}

uint64_t DeviceBudget::reserved(const std::string& device) const {
  absl::MutexLock lock(&mu_);
  auto it = devices_.find(device);
  return it == devices_.end() ? 0 : it->second.reserved;
}

void DeviceBudget::GiveBack(const std::string& device, uint64_t bytes) {
  absl::MutexLock lock(&mu_);
  Device& totals = devices_[device];
  const uint64_t returned = std::min(totals.reserved, bytes);
  totals.reserved -= returned;
  if (totals.ram != nullptr) totals.ram->ReleaseHold(returned);
}

}  // namespace ddo
