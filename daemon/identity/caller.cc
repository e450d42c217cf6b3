#include "daemon/identity/caller.h"

#include "absl/strings/str_cat.h"
#include "ddo/os/process_watch.h"

namespace ddo {

std::string Caller::Describe() const { return absl::StrCat("uid ", uid, " pid ", pid); }

Caller CallerFromCredentials(uid_t uid, gid_t gid, pid_t pid) {
  Caller caller;
  caller.uid = uid;
  caller.gid = gid;
  caller.pid = pid;
  caller.admin = uid == 0 || uid == os::CurrentUserIds().uid;
  return caller;
}

Caller DaemonCaller() {
  const os::UserIds self = os::CurrentUserIds();
  return CallerFromCredentials(self.uid, self.gid, static_cast<pid_t>(os::CurrentProcessId()));
}

}  // namespace ddo
