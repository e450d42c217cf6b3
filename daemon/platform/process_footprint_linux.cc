// A process's footprint on Linux: /proc/<pid>/status and /proc/<pid>/stat.
#include <cerrno>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "daemon/platform/process_footprint.h"

namespace ddo {
namespace {

absl::StatusOr<std::string> ReadProcFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    const int error = errno;
    if (error == EACCES || error == EPERM) {
      return absl::PermissionDeniedError(absl::StrCat(path, " is hidden from ddod"));
    }
    return absl::NotFoundError(absl::StrCat(path, ": no such process"));
  }
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

absl::StatusOr<ProcessFootprint> ReadFootprintAt(const std::string& proc_dir) {
  absl::StatusOr<std::string> status = ReadProcFile(absl::StrCat(proc_dir, "/status"));
  if (!status.ok()) return status.status();
  absl::StatusOr<std::string> stat = ReadProcFile(absl::StrCat(proc_dir, "/stat"));
  if (!stat.ok()) return stat.status();
  ProcessFootprint footprint;
  absl::StatusOr<uint64_t> private_bytes = ParseStatusRssAnon(*status);
  if (!private_bytes.ok()) return private_bytes.status();
  absl::StatusOr<uint64_t> started = ParseStatStartTime(*stat);
  if (!started.ok()) return started.status();
  footprint.private_bytes = *private_bytes;
  footprint.started = *started;
  return footprint;
}

}  // namespace

absl::StatusOr<ProcessFootprint> ReadProcessFootprint(pid_t pid) {
  if (pid <= 0) return absl::InvalidArgumentError(absl::StrCat("pid ", pid, " is no process"));
  return ReadFootprintAt(absl::StrCat("/proc/", pid));
}

absl::StatusOr<ProcessFootprint> ReadOwnFootprint() { return ReadFootprintAt("/proc/self"); }

}  // namespace ddo
