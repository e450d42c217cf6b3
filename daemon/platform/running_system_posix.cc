// The running system on Linux (and WSL): uname, /proc/version, /proc/meminfo.
#include <sys/utsname.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "daemon/common/logging.h"
#include "daemon/platform/system_info.h"

namespace ddo {
namespace {

std::string ReadSmallFile(const char* path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

SystemInfo ReadRunningSystem() {
  SystemInfo info;
  utsname names{};
  if (::uname(&names) == 0) {
    info.os_release = names.release;
    info.hostname = names.nodename;
  }
  info.os = DetectLinuxFlavor(info.os_release, ReadSmallFile("/proc/version"));
  if (auto memory = ParseMemInfo(ReadSmallFile("/proc/meminfo")); memory.ok()) {
    info.memory = *memory;
  } else {
    // /proc may be absent in odd sandboxes: fall back to sysconf, as the seed does.
    const long page = ::sysconf(_SC_PAGESIZE);
    info.memory.total_bytes = static_cast<uint64_t>(page) * ::sysconf(_SC_PHYS_PAGES);
    info.memory.available_bytes = static_cast<uint64_t>(page) * ::sysconf(_SC_AVPHYS_PAGES);
    Logger("platform")->warn("reading /proc/meminfo failed ({}); using sysconf",
                             memory.status().message());
  }
  return info;
}

}  // namespace ddo
