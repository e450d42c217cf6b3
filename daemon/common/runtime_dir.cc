#include "daemon/common/runtime_dir.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "daemon/common/logging.h"
#include "daemon/common/posix_error.h"

namespace ddo {

std::string ParentDirectory(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) {
    return ".";
  }
  return slash == 0 ? "/" : path.substr(0, slash);
}

absl::Status EnsurePrivateDirectory(const std::string& path, bool* created) {
  if (created != nullptr) *created = false;
  // Create missing ancestors first, each 0700.
  for (size_t slash = path.find('/', 1); slash != std::string::npos;
       slash = path.find('/', slash + 1)) {
    const std::string prefix = path.substr(0, slash);
    if (::mkdir(prefix.c_str(), 0700) != 0 && errno != EEXIST) {
      return PosixError(absl::StrCat("mkdir ", prefix), errno);
    }
  }
  if (::mkdir(path.c_str(), 0700) == 0) {
    if (created != nullptr) *created = true;
  } else if (errno != EEXIST) {
    return PosixError(absl::StrCat("mkdir ", path), errno);
  }
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) {
    return PosixError(absl::StrCat("stat ", path), errno);
  }
  if (!S_ISDIR(info.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(path, " exists and is not a directory"));
  }
  // The owner of a directory can always replace what is in it: it must be us, or root (for
  // system directories such as /tmp, where the sticky bit keeps other users off our files).
  const bool others_can_write = (info.st_mode & (S_IWGRP | S_IWOTH)) != 0;
  if (info.st_uid != ::geteuid() && info.st_uid != 0) {
    return absl::PermissionDeniedError(absl::StrCat(
        path, " belongs to uid ", info.st_uid, ", not to this user (uid ", ::geteuid(), ")"));
  }
  if (others_can_write && !(info.st_mode & S_ISVTX)) {
    return absl::PermissionDeniedError(absl::StrCat(
        path, " is writable by other users; use a private directory (chmod 700)"));
  }
  return absl::OkStatus();
}

absl::Status RemoveStaleSocket(const std::string& path) {
  struct stat info {};
  if (::lstat(path.c_str(), &info) != 0) {
    return errno == ENOENT ? absl::OkStatus() : PosixError(absl::StrCat("stat ", path), errno);
  }
  if (!S_ISSOCK(info.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, " exists and is not a socket; choose another --socket"));
  }
  Logger("server")->info("replacing stale socket {} (no daemon holds its lock)", path);
  if (::unlink(path.c_str()) != 0) {
    return PosixError(absl::StrCat("unlink ", path), errno);
  }
  return absl::OkStatus();
}

}  // namespace ddo
