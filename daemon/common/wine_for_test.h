// File: daemon/common/wine_for_test.h
//
// Tests only: whether this Windows build runs under wine, which implements some calls with
// constant answers (GetProcessMemoryInfo's private commit, GetProcessHandleCount: zeros). A
// test of such an answer skips itself there; docs/windows.md lists what only Windows shows.
//
// Thread-safety: any thread.
#ifndef DDO_DAEMON_COMMON_WINE_FOR_TEST_H_
#define DDO_DAEMON_COMMON_WINE_FOR_TEST_H_

#ifdef _WIN32
#include <windows.h>
#endif

namespace ddo {

inline bool RunningUnderWine() {
#ifdef _WIN32
  const HMODULE ntdll = ::GetModuleHandleW(L"ntdll.dll");
  return ntdll != nullptr && ::GetProcAddress(ntdll, "wine_get_version") != nullptr;
#else
  return false;
#endif
}

}  // namespace ddo

#endif  // DDO_DAEMON_COMMON_WINE_FOR_TEST_H_
