// File: daemon/config/budgets.h
//
// How ddod's memory budgets follow from its options and the machine.
//
// Thread-safety: pure functions of their arguments, safe from any thread.
#ifndef DDO_DAEMON_CONFIG_BUDGETS_H_
#define DDO_DAEMON_CONFIG_BUDGETS_H_

#include <cstdint>

#include "daemon/config/daemon_options.h"

namespace ddo {

// --ram-budget-gb when given; otherwise available RAM minus DDO_SYSTEM_RAM_HEADROOM_GB
// (never below zero), like the seed's system_ram_headroom_gb.
uint64_t RamBudgetBytes(const DaemonOptions& options, uint64_t available_bytes);

// --vram-budget-gb capped at the device's size; the whole device when unset.
uint64_t VramBudgetBytes(const DaemonOptions& options, uint64_t device_total_bytes);

}  // namespace ddo

#endif  // DDO_DAEMON_CONFIG_BUDGETS_H_
