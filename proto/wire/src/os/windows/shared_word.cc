#include "ddo/os/shared_word.h"

#include <windows.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "ddo/os/shared_memory.h"
#include "owner_only_security.h"
#include "windows_error.h"

namespace ddo::os {
namespace {

// How long a waiter sleeps on the event before it reads the word again (a second waiter of
// the same word, which the event's one wake does not reach, sees the change this late).
constexpr absl::Duration kSlice = absl::Milliseconds(1);

std::wstring EventName(const std::string& name) { return Widen(absl::StrCat("Local\\", name)); }

}  // namespace

absl::StatusOr<SharedWordSignal> SharedWordSignal::Create(const std::string& name) {
  if (absl::Status valid = CheckSegmentName(name); !valid.ok()) return valid;
  absl::StatusOr<OwnerOnlySecurity> security = OwnerOnlySecurity::Make(SegmentAccess{});
  if (!security.ok()) return security.status();
  const std::wstring event_name = EventName(name);
  NativeHandle event(::CreateEventW(security->attributes(), FALSE, FALSE, event_name.c_str()));
  const DWORD error = ::GetLastError();
  if (!event.valid()) return WindowsError(absl::StrCat("create the signal ", name), error);
  if (error == ERROR_ALREADY_EXISTS) {
    return absl::AlreadyExistsError(absl::StrCat("the signal ", name, " exists already"));
  }
  return SharedWordSignal(std::move(event));
}

absl::StatusOr<SharedWordSignal> SharedWordSignal::Open(const std::string& name) {
  if (absl::Status valid = CheckSegmentName(name); !valid.ok()) return valid;
  const std::wstring event_name = EventName(name);
  NativeHandle event(::OpenEventW(SYNCHRONIZE | EVENT_MODIFY_STATE, FALSE, event_name.c_str()));
  if (!event.valid()) {
    return WindowsError(absl::StrCat("open the signal ", name), ::GetLastError());
  }
  return SharedWordSignal(std::move(event));
}

void SharedWordSignal::Wait(const std::atomic<uint32_t>* word, uint32_t expected,
                            absl::Duration timeout) const {
  const absl::Time deadline = absl::Now() + timeout;
  while (word->load(std::memory_order_acquire) == expected) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) return;
    const DWORD slice = static_cast<DWORD>(
        std::max<int64_t>(1, absl::ToInt64Milliseconds(std::min(left, kSlice))));
    if (::WaitForSingleObject(event_.get(), slice) == WAIT_OBJECT_0) return;  // woken
  }
}

void SharedWordSignal::Wake(const std::atomic<uint32_t>*) const { ::SetEvent(event_.get()); }

}  // namespace ddo::os
