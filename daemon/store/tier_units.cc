// File: daemon/store/tier_units.cc
#include "daemon/store/tier_units.h"

#include <algorithm>
#include <map>

namespace ddo {

uint64_t SessionMargin(const std::vector<TensorEntry>& tensors, uint64_t budget) {
  std::map<uint32_t, uint64_t> unit_bytes;
  for (const TensorEntry& tensor : tensors) unit_bytes[tensor.unit] += tensor.byte_size;
  uint64_t largest = 0;
  for (const auto& [unit, bytes] : unit_bytes) largest = std::max(largest, bytes);
  return std::max(16 * largest, std::min(budget / 8, uint64_t{2} << 30));
}

std::set<uint32_t> SpreadUnits(const std::vector<TensorEntry>& tensors, uint64_t room) {
  std::map<uint32_t, uint64_t> unit_bytes;
  uint64_t total = 0;
  for (const TensorEntry& tensor : tensors) {
    unit_bytes[tensor.unit] += tensor.byte_size + kTensorAlignment;
    total += tensor.byte_size + kTensorAlignment;
  }
  std::set<uint32_t> chosen;
  if (total == 0) return chosen;
  const double fraction = std::min(1.0, static_cast<double>(room) / static_cast<double>(total));
  uint64_t seen = 0;
  uint64_t taken = 0;
  for (const auto& [unit, bytes] : unit_bytes) {
    seen += bytes;
    if (taken + bytes <= room &&
        static_cast<double>(taken + bytes) <= fraction * seen + bytes / 2.0) {
      chosen.insert(unit);
      taken += bytes;
    }
  }
  return chosen;
}

uint64_t LeastWorthPromoting(uint64_t budget) {
  return std::min(uint64_t{64} << 20, budget / 16);
}

}  // namespace ddo
