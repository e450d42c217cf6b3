#include "ddo/os/windows_standby_purge.h"

#include <windows.h>

#include "absl/strings/str_format.h"
#include "ddo/os/native_handle.h"
#include "windows_error.h"

namespace ddo::os {
namespace {

// From the NT headers (not in the Win32 SDK's): the information class and the command.
constexpr ULONG kSystemMemoryListInformation = 80;
constexpr int kMemoryPurgeStandbyList = 4;
constexpr LONG kStatusNotImplemented = static_cast<LONG>(0xC0000002L);
constexpr LONG kStatusInvalidInfoClass = static_cast<LONG>(0xC0000003L);
constexpr LONG kStatusPrivilegeNotHeld = static_cast<LONG>(0xC0000061L);
constexpr char kPrivilege[] = "SeProfileSingleProcessPrivilege";

using NtSetSystemInformationFunction = LONG(WINAPI*)(ULONG, void*, ULONG);

absl::Status EnablePrivilege() {
  HANDLE raw = nullptr;
  if (!::OpenProcessToken(::GetCurrentProcess(), TOKEN_ADJUST_PRIVILEGES | TOKEN_QUERY, &raw)) {
    return WindowsError("open this process's token", ::GetLastError());
  }
  NativeHandle token(raw);
  TOKEN_PRIVILEGES privileges{};
  privileges.PrivilegeCount = 1;
  privileges.Privileges[0].Attributes = SE_PRIVILEGE_ENABLED;
  if (!::LookupPrivilegeValueA(nullptr, kPrivilege, &privileges.Privileges[0].Luid)) {
    return WindowsError(absl::StrFormat("look up %s", kPrivilege), ::GetLastError());
  }
  // AdjustTokenPrivileges succeeds without the privilege: the last error says it was not held.
  if (!::AdjustTokenPrivileges(token.get(), FALSE, &privileges, 0, nullptr, nullptr) ||
      ::GetLastError() == ERROR_NOT_ALL_ASSIGNED) {
    return absl::PermissionDeniedError(absl::StrFormat(
        "this process's account does not hold %s (an administrator's or the ddod service's "
        "does)",
        kPrivilege));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status PurgeStandbyList() {
  if (absl::Status enabled = EnablePrivilege(); !enabled.ok()) return enabled;
  HMODULE ntdll = ::GetModuleHandleW(L"ntdll.dll");
  auto set_information = ntdll == nullptr
                             ? nullptr
                             : reinterpret_cast<NtSetSystemInformationFunction>(
                                   reinterpret_cast<void*>(
                                       ::GetProcAddress(ntdll, "NtSetSystemInformation")));
  if (set_information == nullptr) {
    return absl::UnimplementedError("ntdll has no NtSetSystemInformation");
  }
  int command = kMemoryPurgeStandbyList;
  const LONG status = set_information(kSystemMemoryListInformation, &command, sizeof(command));
  if (status == 0) return absl::OkStatus();
  if (status == kStatusPrivilegeNotHeld) {
    return absl::PermissionDeniedError(absl::StrFormat("the purge needs %s", kPrivilege));
  }
  if (status == kStatusNotImplemented || status == kStatusInvalidInfoClass) {
    return absl::UnimplementedError(
        absl::StrFormat("this system does not purge its standby list (NTSTATUS 0x%08X)",
                        static_cast<ULONG>(status)));
  }
  return absl::InternalError(absl::StrFormat("purging the standby list failed (NTSTATUS 0x%08X)",
                                             static_cast<ULONG>(status)));
}

}  // namespace ddo::os
