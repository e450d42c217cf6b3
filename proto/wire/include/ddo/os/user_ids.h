// File: proto/wire/include/ddo/os/user_ids.h
//
// The numbers ddod keys its callers by, on both systems: `uid_t`, `gid_t` and `pid_t` as POSIX
// names them.
//
//   POSIX:   the kernel's own (sys/types.h); ddod's account is whatever geteuid() says, and
//            uid 0 is root.
//   Windows: an account is a SID, not a number. ddod numbers the SIDs it meets itself (the
//            identity pipe names each caller's SID), and its own account is number 0 there,
//            so that "uid 0 or ddod's own uid is an admin" means the same on both systems.
//            Process ids are the system's (DWORD, which fits pid_t).
//
// Thread-safety: CurrentUserIds may be called from any thread.
#ifndef DDO_OS_USER_IDS_H_
#define DDO_OS_USER_IDS_H_

#include <sys/types.h>  // POSIX; mingw-w64's has pid_t too

#include <cstdint>

#ifdef _WIN32
// Windows has no uid_t or gid_t (and MSVC no pid_t): the same names, for ddod's numbering.
using uid_t = uint32_t;
using gid_t = uint32_t;
#ifdef _MSC_VER
using pid_t = int;
#endif
#endif

namespace ddo::os {

// The account this process runs as: its effective uid and gid (POSIX), or 0 and 0 (Windows:
// ddod's own account, by its numbering above).
struct UserIds {
  uid_t uid = 0;
  gid_t gid = 0;
};
UserIds CurrentUserIds();

}  // namespace ddo::os

#endif  // DDO_OS_USER_IDS_H_
