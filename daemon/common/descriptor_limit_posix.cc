// RLIMIT_NOFILE and /proc/self/fd: the descriptors of a POSIX process.
#include "daemon/common/descriptor_reserve.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>

#include "ddo/wire/posix_error.h"
#include "ddo/wire/unique_fd.h"

namespace ddo {

absl::StatusOr<DescriptorLimit> RaiseDescriptorLimit() {
  rlimit files{};
  if (::getrlimit(RLIMIT_NOFILE, &files) != 0) return PosixError("getrlimit(RLIMIT_NOFILE)", errno);
  DescriptorLimit limit{files.rlim_cur, files.rlim_cur, files.rlim_max};
  if (files.rlim_cur < files.rlim_max) {
    files.rlim_cur = files.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &files) != 0) {
      return PosixError("setrlimit(RLIMIT_NOFILE) to the hard limit", errno);
    }
    limit.soft = files.rlim_max;
  }
  return limit;
}

absl::StatusOr<size_t> CountOpenDescriptors() {
  UniqueFd directory(::open("/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!directory.valid()) return PosixError("open /proc/self/fd", errno);
  // getdents64 straight into a buffer: no DIR allocation, and no entry is copied twice.
  alignas(8) char buffer[16384];
  size_t entries = 0;
  while (true) {
    const long read = ::syscall(SYS_getdents64, directory.get(), buffer, sizeof(buffer));
    if (read < 0) return PosixError("getdents64 /proc/self/fd", errno);
    if (read == 0) break;
    for (long offset = 0; offset < read;) {
      const auto* entry = reinterpret_cast<const dirent64*>(buffer + offset);
      if (entry->d_name[0] != '.') ++entries;
      offset += entry->d_reclen;
    }
  }
  return entries > 0 ? entries - 1 : 0;  // less the directory's own descriptor
}

DescriptorReserve DescriptorReserve::ForThisProcess(size_t reserve) {
  rlimit files{};
  size_t limit = 1024;
  if (::getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur != RLIM_INFINITY) {
    limit = static_cast<size_t>(files.rlim_cur);
  }
  return DescriptorReserve(limit, reserve);
}

}  // namespace ddo
