// File: daemon/config/daemon_options.h
//
// ddod's own settings, resolved once at start from the command line and ddod's environment.
// For these process-level settings a command-line flag wins over the DDO_* variable, which
// wins over the preset, which wins over the built-in default (docs/configuration.md). The
// per-request precedence that puts a client's environment above ddod's flags is the policy's
// business, not this file's.
//
// Thread-safety: DaemonOptions is a value, resolved once on the main thread and then only read
// (DaemonContext shares it); the functions are pure.
#ifndef DDO_DAEMON_CONFIG_DAEMON_OPTIONS_H_
#define DDO_DAEMON_CONFIG_DAEMON_OPTIONS_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "daemon/common/log_formatter.h"
#include "daemon/config/environment.h"
#include "daemon/config/presets.h"
#include "spdlog/common.h"

namespace ddo {

enum class RamBudgetScope { kRunners, kPool };

struct DaemonOptions {
  // The preset as given (--preset, DDO_PRESET or the default "auto") and what it resolved to.
  std::string requested_preset = kDefaultDaemonPreset;
  const PresetDefinition* preset = nullptr;

  std::string socket_path;
  // Loopback host:port, or empty when TCP is off.
  std::string listen_address;
  // Group allowed to use the socket (mode 0660); empty for owner-only (0600).
  std::string socket_group;
  spdlog::level::level_enum log_level = spdlog::level::info;
  LogFormat log_format = LogFormat::kText;

  // Host pool budget; unset means available RAM minus system_ram_headroom_gb.
  std::optional<double> ram_budget_gb;
  // What the RAM budget bounds (--ram-budget-scope): kPool, the pool alone; kRunners, the pool
  // with ddod's own heap and the private memory of the runners it serves (host_memory_meter.h).
  RamBudgetScope ram_budget_scope = RamBudgetScope::kPool;
  // Budget for ddod's own allocations on each device; unset means the whole device.
  std::optional<double> vram_budget_gb;
  double system_ram_headroom_gb = 6.0;
  // DDO_AVAILABLE_SYSTEM_RAM_GB: pretend this much RAM is available (tests, simulations).
  std::optional<double> available_ram_override_gb;
  // DDO_PLATFORM: pretend to run on "linux", "wsl" or "windows" (tests, simulations): the WSL
  // pinning and stream rules follow it.
  std::optional<std::string> platform_override;
  // DDO_HOST_DEVICES: host-backend streaming devices "cpu" (also "cpu:0"), "cpu:1", ...: several
  // devices on a machine without them (tests and simulations of multi-device setups).
  int host_devices = 1;

  // What one user (uid) of a shared ddod may hold at once; ddod's own user and root are not
  // bound by them (docs/security.md). Unset pool bytes: the pool budget is the only bound.
  int max_leases_per_user = 32;
  int max_uploads_per_user = 8;
  int max_sessions_per_user = 256;
  std::optional<double> max_user_pool_gb;
  // Spill files of uploads on the state directory's disk (docs/configuration.md): in all
  // (unset: the RAM budget; 0: no spilling) and per user (unset: all of it).
  std::optional<double> spill_budget_gb;
  std::optional<double> max_user_spill_gb;
  // The pre-faulted reserve (pool/segment_reserve.h); unset: a quarter of the RAM budget, at
  // most 8 GiB, where ddod keeps weights warm (warm_process), else none.
  std::optional<double> prefaulted_reserve_gb;
  // Connections to each of ddod's two Unix sockets (gRPC, identity): per uid (admins too) and
  // in all (admins are refused only by their per-uid limit). Descriptors kept for ddod's own
  // work: no connection is accepted while fewer would be free (docs/security.md §5).
  int max_connections_per_user = 64;
  int max_connections = 1024;
  int descriptor_reserve = 256;
  // Evict a component after this long without a session (unless its load set its own);
  // infinite: never (only the pool's LRU evicts).
  absl::Duration keep_alive = absl::InfiniteDuration();

  std::string state_dir;
  // Embedded mode: exit when this process ends (implies discard_pool).
  std::optional<int64_t> parent_pid;
  // Remove the pool's segments and manifest at shutdown instead of keeping them warm for the
  // next ddod (--discard).
  bool discard_pool = false;

  // DDO_PIN_CPU_MEMORY (preset one_shot_fast and warm_process: on): page-lock the pool.
  bool pin_cpu_memory = false;
  // DDO_DISABLE_PIN_ON_WSL (default on): never pin on WSL, whatever the above says.
  bool disable_pin_on_wsl = true;
  // DDO_PIN_CPU_WORKERS: threads that pre-touch segments before pinning.
  int pin_workers = 4;
  // The file tier: DDO_FILE_READ_THREADS, threads that read file-tier units (0: the CPUs, 2 to
  // 8); DDO_FILE_STAGING_BUFFERS, staging buffers per file-tier session.
  int file_read_threads = 0;
  int file_staging_buffers = 4;

  // The DDO_* settings in ddod's environment and configuration file (SettingVariables): a
  // layer of ResolveSettings.
  std::map<std::string, std::string> setting_environment;
  // --config: the file read (empty: none) and what it set.
  std::string config_path;
  std::map<std::string, std::string> config_values;

  bool show_help = false;
  bool show_version = false;
};

// Whether ddod reads the variable `name` (a process option's DDO_* variable or a setting).
bool IsDaemonVariable(absl::string_view name);

// Resolves ddod's options. `args` excludes the program name. Errors are InvalidArgument and
// name the flag or variable, the value and what was expected.
absl::StatusOr<DaemonOptions> ResolveDaemonOptions(const std::vector<std::string>& args,
                                                   const Environment& env,
                                                   const UserContext& user);

// The --help text.
std::string DaemonUsage(const UserContext& user);

}  // namespace ddo

#endif  // DDO_DAEMON_CONFIG_DAEMON_OPTIONS_H_
