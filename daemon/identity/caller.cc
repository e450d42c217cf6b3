#include "daemon/identity/caller.h"

#include <unistd.h>

#include "absl/strings/str_cat.h"

namespace ddo {

std::string Caller::Describe() const { return absl::StrCat("uid ", uid, " pid ", pid); }

Caller CallerFromCredentials(uid_t uid, gid_t gid, pid_t pid) {
  Caller caller;
  caller.uid = uid;
  caller.gid = gid;
  caller.pid = pid;
  caller.admin = uid == 0 || uid == ::geteuid();
  return caller;
}

Caller DaemonCaller() { return CallerFromCredentials(::geteuid(), ::getegid(), ::getpid()); }

}  // namespace ddo
