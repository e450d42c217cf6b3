#include "daemon/platform/system_info.h"

#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "daemon/config/values.h"

namespace ddo {

const char* OsFlavorName(OsFlavor flavor) {
  switch (flavor) {
    case OsFlavor::kLinux:
      return "linux";
    case OsFlavor::kWsl:
      return "wsl";
    case OsFlavor::kWindows:
      return "windows";
    case OsFlavor::kOther:
      break;
  }
  return "other";
}

absl::StatusOr<MemInfo> ParseMemInfo(absl::string_view text) {
  std::optional<uint64_t> total, available, free, buffers, cached;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    std::vector<absl::string_view> fields = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (fields.size() < 2) {
      continue;
    }
    uint64_t kib = 0;
    if (!absl::SimpleAtoi(fields[1], &kib)) {
      continue;
    }
    const uint64_t bytes = kib * 1024;
    if (fields[0] == "MemTotal:") total = bytes;
    if (fields[0] == "MemAvailable:") available = bytes;
    if (fields[0] == "MemFree:") free = bytes;
    if (fields[0] == "Buffers:") buffers = bytes;
    if (fields[0] == "Cached:") cached = bytes;
  }
  if (!total.has_value()) {
    return absl::InvalidArgumentError("meminfo has no MemTotal line");
  }
  MemInfo info;
  info.total_bytes = *total;
  info.available_bytes =
      available.value_or(free.value_or(0) + buffers.value_or(0) + cached.value_or(0));
  return info;
}

OsFlavor DetectLinuxFlavor(absl::string_view kernel_release, absl::string_view proc_version) {
  for (absl::string_view text : {kernel_release, proc_version}) {
    const std::string lowered = absl::AsciiStrToLower(text);
    if (absl::StrContains(lowered, "microsoft") || absl::StrContains(lowered, "wsl")) {
      return OsFlavor::kWsl;
    }
  }
  return OsFlavor::kLinux;
}

SystemInfo QuerySystemInfo(std::optional<double> available_ram_override_gib,
                           const std::optional<std::string>& platform_override) {
  SystemInfo info = ReadRunningSystem();
  if (platform_override) {
    info.os = *platform_override == "wsl"       ? OsFlavor::kWsl
              : *platform_override == "windows" ? OsFlavor::kWindows
                                                : OsFlavor::kLinux;
  }
  info.cpu_count = std::thread::hardware_concurrency();
  if (available_ram_override_gib.has_value()) {
    info.memory.available_bytes = GiBToBytes(*available_ram_override_gib);
    info.available_overridden = true;
  }
  return info;
}

}  // namespace ddo
