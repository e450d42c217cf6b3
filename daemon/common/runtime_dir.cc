#include "daemon/common/runtime_dir.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "daemon/common/logging.h"
#include "daemon/common/status_macros.h"
#include "ddo/wire/daemon_address.h"
#include "ddo/wire/posix_error.h"

namespace ddo {
namespace {

std::string Describe(const struct stat& info) {
  const char* kind = S_ISDIR(info.st_mode)   ? "a directory"
                     : S_ISLNK(info.st_mode) ? "a symbolic link"
                     : S_ISREG(info.st_mode) ? "a regular file"
                                             : "not a directory";
  return absl::StrFormat("%s owned by uid %d with mode %04o", kind, info.st_uid,
                         info.st_mode & 07777);
}

// What is wrong with `info` as the directory `path` ("" when nothing).
std::string DirectoryProblem(const std::string& path, const struct stat& info) {
  const uid_t me = ::geteuid();
  const std::string per_user = PerUserDirectory(me);
  if (path == per_user) {
    // Anyone may create /tmp/ddo-<uid> first: only the user's own 0700 directory will do.
    if (!S_ISDIR(info.st_mode) || info.st_uid != me || (info.st_mode & 07777) != 0700) {
      return absl::StrCat("it is ", Describe(info), ", but it must be a directory owned by uid ",
                          me, " with mode 0700: another user may have created it first. "
                          "Remove it (as root if need be: rm -r ", path,
                          ") or set XDG_RUNTIME_DIR to a directory only you own");
    }
    return "";
  }
  if (!S_ISDIR(info.st_mode)) {
    return absl::StrCat("it is ", Describe(info), ", not a directory (a symbolic link is not "
                        "followed)");
  }
  // The owner of a directory can always replace what is in it: it must be us, or root.
  if (info.st_uid != me && info.st_uid != 0) {
    return absl::StrCat("it belongs to uid ", info.st_uid, ", not to this user (uid ", me, ")");
  }
  if ((info.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return absl::StrCat("it is writable by other users (", Describe(info),
                        "); use a private directory (chmod 700)");
  }
  return "";
}

// An ancestor ddod goes through: only /tmp/ddo-<uid> is checked (the default state directory,
// /tmp/ddo-<uid>/state, lies in it), before anything is made below it.
absl::Status CheckAncestor(const std::string& ancestor) {
  if (ancestor != PerUserDirectory(::geteuid())) return absl::OkStatus();
  struct stat info {};
  if (::lstat(ancestor.c_str(), &info) != 0) {
    return PosixError(absl::StrCat("stat ", ancestor), errno);
  }
  if (std::string problem = DirectoryProblem(ancestor, info); !problem.empty()) {
    return absl::PermissionDeniedError(absl::StrCat("refusing ", ancestor, ": ", problem));
  }
  return absl::OkStatus();
}

}  // namespace

std::string ParentDirectory(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) {
    return ".";
  }
  return slash == 0 ? "/" : path.substr(0, slash);
}

std::string LastComponent(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

absl::StatusOr<PrivateDirectory> PrivateDirectory::Open(const std::string& path) {
  bool created = false;
  // Create missing ancestors first, each 0700.
  for (size_t slash = path.find('/', 1); slash != std::string::npos;
       slash = path.find('/', slash + 1)) {
    const std::string prefix = path.substr(0, slash);
    if (::mkdir(prefix.c_str(), 0700) != 0 && errno != EEXIST) {
      return PosixError(absl::StrCat("mkdir ", prefix), errno);
    }
    DDO_RETURN_IF_ERROR(CheckAncestor(prefix));
  }
  if (::mkdir(path.c_str(), 0700) == 0) {
    created = true;
  } else if (errno != EEXIST) {
    return PosixError(absl::StrCat("mkdir ", path), errno);
  }
  // O_NOFOLLOW refuses a link in place of the directory (ELOOP, or ENOTDIR with O_DIRECTORY);
  // lstat says what is there instead. The checks are made on what was opened.
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  struct stat info {};
  if (!fd.valid()) {
    const int open_errno = errno;
    if ((open_errno == ELOOP || open_errno == ENOTDIR) && ::lstat(path.c_str(), &info) == 0) {
      return absl::PermissionDeniedError(
          absl::StrCat("refusing ", path, ": ", DirectoryProblem(path, info)));
    }
    return PosixError(absl::StrCat("open ", path), open_errno);
  }
  if (::fstat(fd.get(), &info) != 0) {
    return PosixError(absl::StrCat("stat ", path), errno);
  }
  if (std::string problem = DirectoryProblem(path, info); !problem.empty()) {
    return absl::PermissionDeniedError(absl::StrCat("refusing ", path, ": ", problem));
  }
  return PrivateDirectory(path, std::move(fd), created);
}

absl::Status EnsurePrivateDirectory(const std::string& path, bool* created) {
  if (created != nullptr) *created = false;
  absl::StatusOr<PrivateDirectory> directory = PrivateDirectory::Open(path);
  if (!directory.ok()) return directory.status();
  if (created != nullptr) *created = directory->created();
  return absl::OkStatus();
}

absl::Status RemoveStaleSocket(const std::string& path) {
  const std::string parent = ParentDirectory(path);
  const std::string name = LastComponent(path);
  UniqueFd directory(::open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!directory.valid()) {
    return errno == ENOENT ? absl::OkStatus() : PosixError(absl::StrCat("open ", parent), errno);
  }
  struct stat info {};
  if (::fstatat(directory.get(), name.c_str(), &info, AT_SYMLINK_NOFOLLOW) != 0) {
    return errno == ENOENT ? absl::OkStatus() : PosixError(absl::StrCat("stat ", path), errno);
  }
  if (!S_ISSOCK(info.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, " exists and is not a socket; choose another --socket"));
  }
  Logger("server")->info("replacing stale socket {} (no daemon holds its lock)", path);
  if (::unlinkat(directory.get(), name.c_str(), 0) != 0) {
    return PosixError(absl::StrCat("unlink ", path), errno);
  }
  return absl::OkStatus();
}

}  // namespace ddo
