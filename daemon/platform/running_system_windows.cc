// The running system on Windows: the version from RtlGetVersion (GetVersionEx lies to programs
// without a manifest), the DNS host name, and GlobalMemoryStatusEx's physical memory.
#include <windows.h>

#include "absl/strings/str_cat.h"
#include "daemon/common/logging.h"
#include "daemon/platform/system_info.h"

namespace ddo {
namespace {

// "10.0.22631": major.minor.build, or empty when ntdll does not say.
std::string WindowsVersion() {
  using RtlGetVersionFunction = LONG(WINAPI*)(OSVERSIONINFOW*);
  const HMODULE ntdll = ::GetModuleHandleW(L"ntdll.dll");
  if (ntdll == nullptr) return "";
  const auto get_version = reinterpret_cast<RtlGetVersionFunction>(
      reinterpret_cast<void*>(::GetProcAddress(ntdll, "RtlGetVersion")));
  OSVERSIONINFOW version{};
  version.dwOSVersionInfoSize = sizeof(version);
  if (get_version == nullptr || get_version(&version) != 0) return "";
  return absl::StrCat(version.dwMajorVersion, ".", version.dwMinorVersion, ".",
                      version.dwBuildNumber);
}

std::string HostName() {
  char name[256];
  DWORD size = sizeof(name);
  if (!::GetComputerNameExA(ComputerNameDnsHostname, name, &size)) return "";
  return std::string(name, size);
}

}  // namespace

SystemInfo ReadRunningSystem() {
  SystemInfo info;
  info.os = OsFlavor::kWindows;
  info.os_release = WindowsVersion();
  info.hostname = HostName();
  MEMORYSTATUSEX memory{};
  memory.dwLength = sizeof(memory);
  if (::GlobalMemoryStatusEx(&memory)) {
    info.memory.total_bytes = memory.ullTotalPhys;
    info.memory.available_bytes = memory.ullAvailPhys;
  } else {
    Logger("platform")->warn("GlobalMemoryStatusEx failed (error {}); RAM unknown",
                             static_cast<unsigned long>(::GetLastError()));
  }
  return info;
}

}  // namespace ddo
