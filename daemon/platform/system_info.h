// File: daemon/platform/system_info.h
//
// Facts about the host: which OS flavour (Linux, WSL, Windows), RAM, CPUs. The parsers are
// pure functions of the files' text so tests can feed them anything; QuerySystemInfo reads
// the real files.
//
// Thread-safety: any thread; the parsers are pure and QuerySystemInfo reads the system (/proc
// and uname, or Windows' calls) afresh on each call, keeping no state.
#ifndef DDO_DAEMON_PLATFORM_SYSTEM_INFO_H_
#define DDO_DAEMON_PLATFORM_SYSTEM_INFO_H_

#include <cstdint>
#include <optional>
#include <string>
#include "absl/strings/string_view.h"

#include "absl/status/statusor.h"

namespace ddo {

enum class OsFlavor { kLinux, kWsl, kWindows, kOther };

const char* OsFlavorName(OsFlavor flavor);

struct MemInfo {
  uint64_t total_bytes = 0;
  uint64_t available_bytes = 0;
};

// Parses /proc/meminfo text ("MemTotal:  16384 kB" ...). Without MemAvailable (kernels before
// 3.14) available is MemFree + Buffers + Cached.
absl::StatusOr<MemInfo> ParseMemInfo(absl::string_view text);

// WSL when the kernel release or /proc/version mentions "microsoft" or "wsl" (the seed's rule).
OsFlavor DetectLinuxFlavor(absl::string_view kernel_release, absl::string_view proc_version);

struct SystemInfo {
  OsFlavor os = OsFlavor::kOther;
  std::string os_release;
  std::string hostname;
  uint32_t cpu_count = 0;
  MemInfo memory;
  bool available_overridden = false;
};

// The running system as the OS reports it (running_system_posix.cc: uname and /proc;
// running_system_windows.cc: RtlGetVersion and GlobalMemoryStatusEx); cpu_count is left to
// QuerySystemInfo.
SystemInfo ReadRunningSystem();

// Reads the running system. `available_ram_override_gib` replaces the detected available RAM.
SystemInfo QuerySystemInfo(std::optional<double> available_ram_override_gib,
                           const std::optional<std::string>& platform_override = std::nullopt);

}  // namespace ddo

#endif  // DDO_DAEMON_PLATFORM_SYSTEM_INFO_H_
