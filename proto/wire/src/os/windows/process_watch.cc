#include "ddo/os/process_watch.h"

#include <windows.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "windows_error.h"

namespace ddo::os {

absl::StatusOr<ProcessWatch> ProcessWatch::Open(ProcessId pid) {
  if (pid <= 0 || pid > 0xffffffffLL) {
    return absl::InvalidArgumentError(absl::StrCat("no process has pid ", pid));
  }
  NativeHandle process(::OpenProcess(SYNCHRONIZE | PROCESS_QUERY_LIMITED_INFORMATION, FALSE,
                                     static_cast<DWORD>(pid)));
  if (!process.valid()) {
    const DWORD error = ::GetLastError();
    // OpenProcess answers ERROR_INVALID_PARAMETER for a pid that names no process.
    if (error == ERROR_INVALID_PARAMETER) {
      return absl::NotFoundError(absl::StrCat("process ", pid, " is not running"));
    }
    return WindowsError(absl::StrCat("watch process ", pid), error);
  }
  // A handle to a process that has ended stays valid (and signalled) while anyone holds one.
  if (::WaitForSingleObject(process.get(), 0) == WAIT_OBJECT_0) {
    return absl::NotFoundError(absl::StrCat("process ", pid, " is not running"));
  }
  return ProcessWatch(pid, std::move(process));
}

bool ProcessWatch::WaitForExit(absl::Duration timeout) const {
  DWORD milliseconds = INFINITE;
  if (timeout != absl::InfiniteDuration()) {
    milliseconds = static_cast<DWORD>(std::clamp<int64_t>(
        absl::ToInt64Milliseconds(absl::Ceil(timeout, absl::Milliseconds(1))), 0,
        INFINITE - 1));
  }
  return ::WaitForSingleObject(handle_.get(), milliseconds) == WAIT_OBJECT_0;
}

ProcessId CurrentProcessId() { return static_cast<ProcessId>(::GetCurrentProcessId()); }

}  // namespace ddo::os
