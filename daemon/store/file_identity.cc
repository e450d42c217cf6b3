#include "daemon/store/file_identity.h"

#include <sys/stat.h>

#include <cerrno>

#include "ddo/wire/posix_error.h"

namespace ddo {

absl::StatusOr<FileIdentity> IdentityOfFile(int fd) {
  struct stat info {};
  if (::fstat(fd, &info) != 0) return PosixError("fstat", errno);
  FileIdentity identity;
  identity.device = static_cast<uint64_t>(info.st_dev);
  identity.inode = static_cast<uint64_t>(info.st_ino);
  identity.size = static_cast<uint64_t>(info.st_size);
  identity.modified_ns = static_cast<int64_t>(info.st_mtim.tv_sec) * 1000000000 + info.st_mtim.tv_nsec;
  identity.changed_ns = static_cast<int64_t>(info.st_ctim.tv_sec) * 1000000000 + info.st_ctim.tv_nsec;
  return identity;
}

}  // namespace ddo
