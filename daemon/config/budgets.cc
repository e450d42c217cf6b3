#include "daemon/config/budgets.h"

#include <algorithm>

#include "daemon/config/values.h"

namespace ddo {

uint64_t RamBudgetBytes(const DaemonOptions& options, uint64_t available_bytes) {
  if (options.ram_budget_gb.has_value()) {
    return GiBToBytes(*options.ram_budget_gb);
  }
  const uint64_t headroom = GiBToBytes(options.system_ram_headroom_gb);
  return available_bytes > headroom ? available_bytes - headroom : 0;
}

uint64_t VramBudgetBytes(const DaemonOptions& options, uint64_t device_total_bytes) {
  if (!options.vram_budget_gb.has_value()) {
    return device_total_bytes;
  }
  return std::min(GiBToBytes(*options.vram_budget_gb), device_total_bytes);
}

}  // namespace ddo
