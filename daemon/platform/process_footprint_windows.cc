// A process's footprint on Windows: its private commit (GetProcessMemoryInfo) and creation
// time (GetProcessTimes), through a handle with the least access that reads them.
#include <windows.h>
#include <psapi.h>

#include "absl/strings/str_cat.h"
#include "daemon/platform/process_footprint.h"

namespace ddo {
namespace {

absl::StatusOr<ProcessFootprint> ReadFootprintOf(HANDLE process) {
  PROCESS_MEMORY_COUNTERS_EX counters{};
  counters.cb = sizeof(counters);
  FILETIME created{}, exited{}, kernel{}, user{};
  if (!K32GetProcessMemoryInfo(process, reinterpret_cast<PROCESS_MEMORY_COUNTERS*>(&counters),
                               sizeof(counters)) ||
      !GetProcessTimes(process, &created, &exited, &kernel, &user)) {
    return absl::UnavailableError(
        absl::StrCat("reading the process's memory failed (error ", GetLastError(), ")"));
  }
  ProcessFootprint footprint;
  footprint.private_bytes = counters.PrivateUsage;
  footprint.started = (uint64_t{created.dwHighDateTime} << 32) | created.dwLowDateTime;
  return footprint;
}

}  // namespace

absl::StatusOr<ProcessFootprint> ReadProcessFootprint(pid_t pid) {
  if (pid <= 0) return absl::InvalidArgumentError(absl::StrCat("pid ", pid, " is no process"));
  HANDLE process = OpenProcess(PROCESS_QUERY_LIMITED_INFORMATION, FALSE, static_cast<DWORD>(pid));
  if (process == nullptr) {
    const DWORD error = GetLastError();
    if (error == ERROR_ACCESS_DENIED) {
      return absl::PermissionDeniedError(absl::StrCat("process ", pid, " is hidden from ddod"));
    }
    return absl::NotFoundError(absl::StrCat("process ", pid, ": no such process"));
  }
  absl::StatusOr<ProcessFootprint> footprint = ReadFootprintOf(process);
  CloseHandle(process);
  return footprint;
}

absl::StatusOr<ProcessFootprint> ReadOwnFootprint() {
  return ReadFootprintOf(GetCurrentProcess());
}

}  // namespace ddo
