#include "ddo/os/windows_instance_lock.h"

#include <windows.h>

#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "ddo/os/process_watch.h"
#include "owner_only_security.h"
#include "windows_error.h"

namespace ddo::os {
namespace {

// The pid the lock file records ("" when unreadable): read through a second handle, since the
// holder's lock covers only bytes past the pid.
std::string RecordedPid(const std::wstring& path) {
  NativeHandle file(::CreateFileW(path.c_str(), GENERIC_READ,
                                  FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE, nullptr,
                                  OPEN_EXISTING, FILE_ATTRIBUTE_NORMAL, nullptr));
  if (!file.valid()) return "";
  char text[32] = {};
  DWORD read = 0;
  if (!::ReadFile(file.get(), text, sizeof(text) - 1, &read, nullptr)) return "";
  int64_t pid = 0;
  return absl::SimpleAtoi(absl::string_view(text, read), &pid) ? std::to_string(pid) : "";
}

// The lock covers one byte far past the pid, so that readers of the pid are never blocked.
constexpr DWORD kLockOffset = 1u << 20;

}  // namespace

absl::StatusOr<WindowsInstanceLock> WindowsInstanceLock::Acquire(const std::string& socket_path) {
  const std::string lock_path = socket_path + ".lock";
  const std::wstring path = Widen(lock_path);
  absl::StatusOr<OwnerOnlySecurity> security = OwnerOnlySecurity::Make(SegmentAccess{});
  if (!security.ok()) return security.status();
  NativeHandle file(::CreateFileW(path.c_str(), GENERIC_READ | GENERIC_WRITE,
                                  FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE,
                                  security->attributes(), OPEN_ALWAYS,
                                  FILE_ATTRIBUTE_NORMAL, nullptr));
  if (!file.valid()) {
    return WindowsError(absl::StrCat("open the lock file ", lock_path), ::GetLastError());
  }
  OVERLAPPED where{};
  where.Offset = kLockOffset;
  if (!::LockFileEx(file.get(), LOCKFILE_EXCLUSIVE_LOCK | LOCKFILE_FAIL_IMMEDIATELY, 0, 1, 0,
                    &where)) {
    const DWORD error = ::GetLastError();
    if (error == ERROR_LOCK_VIOLATION || error == ERROR_IO_PENDING) {
      const std::string holder = RecordedPid(path);
      return absl::AlreadyExistsError(absl::StrCat(
          "another ddod serves ", socket_path,
          holder.empty() ? "" : absl::StrCat(" (process ", holder, ")")));
    }
    return WindowsError(absl::StrCat("lock ", lock_path), error);
  }
  // Ours now: record this process's pid from the start of the file.
  const std::string pid = std::to_string(CurrentProcessId());
  DWORD written = 0;
  if (::SetFilePointer(file.get(), 0, nullptr, FILE_BEGIN) != 0 ||
      !::SetEndOfFile(file.get()) ||
      !::WriteFile(file.get(), pid.data(), static_cast<DWORD>(pid.size()), &written, nullptr)) {
    return WindowsError(absl::StrCat("write ", lock_path), ::GetLastError());
  }
  return WindowsInstanceLock(lock_path, std::move(file));
}

WindowsInstanceLock::~WindowsInstanceLock() {
  if (!file_.valid()) return;
  file_.Close();  // releases the lock
  ::DeleteFileW(Widen(lock_path_).c_str());  // a new holder may have it open: then it stays
}

}  // namespace ddo::os
