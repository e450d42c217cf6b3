// Handles of a Windows process: no limit to raise (the kernel allows 2^24 handles a process,
// far beyond what the accept loops would ever hold), and GetProcessHandleCount counts them.
#include <windows.h>

#include "absl/strings/str_cat.h"
#include "daemon/common/descriptor_reserve.h"

namespace ddo {
namespace {

constexpr uint64_t kHandlesPerProcess = uint64_t{1} << 24;

}  // namespace

absl::StatusOr<DescriptorLimit> RaiseDescriptorLimit() {
  return DescriptorLimit{kHandlesPerProcess, kHandlesPerProcess, kHandlesPerProcess};
}

absl::StatusOr<size_t> CountOpenDescriptors() {
  DWORD handles = 0;
  if (!::GetProcessHandleCount(::GetCurrentProcess(), &handles)) {
    return absl::UnavailableError(
        absl::StrCat("GetProcessHandleCount failed (error ", ::GetLastError(), ")"));
  }
  return static_cast<size_t>(handles);
}

DescriptorReserve DescriptorReserve::ForThisProcess(size_t reserve) {
  return DescriptorReserve(static_cast<size_t>(kHandlesPerProcess), reserve);
}

}  // namespace ddo
