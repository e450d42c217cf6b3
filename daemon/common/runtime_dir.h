// File: daemon/common/runtime_dir.h
//
// Directories ddod creates for its socket and state: created owner-only (0700) when missing,
// and refused when they exist as a symbolic link, belong to someone else or are writable by
// others, so that nobody can swap the socket under a client or redirect a file ddod writes
// there (issue 31, finding 7: a squatted /tmp/ddo-<uid> made ddod truncate a victim's file).
//
// Thread-safety: free functions, callable from any thread; a PrivateDirectory is a value that
// one thread owns (its descriptor may be used from any thread once opened).
#ifndef DDO_DAEMON_COMMON_RUNTIME_DIR_H_
#define DDO_DAEMON_COMMON_RUNTIME_DIR_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ddo/wire/unique_fd.h"

namespace ddo {

// A checked directory, held open: files in it are opened relative to its descriptor, so a
// directory swapped for a link after the check is never followed. Move-only.
class PrivateDirectory {
 public:
  // mkdir -p with mode 0700 for the directories it creates, then opens `path` without
  // following a symbolic link (O_DIRECTORY | O_NOFOLLOW) and checks what it opened: a
  // directory owned by ddod's effective uid (or root, for system directories such as /run)
  // that no one else may write to (a sticky /tmp does not pass either); /tmp/ddo-<uid>, which
  // anyone can create first in /tmp, must moreover be the user's with mode 0700 exactly, as
  // the clients check it. PERMISSION_DENIED or FAILED_PRECONDITION naming the directory and
  // what is wrong with it.
  static absl::StatusOr<PrivateDirectory> Open(const std::string& path);

  PrivateDirectory(PrivateDirectory&&) = default;
  PrivateDirectory& operator=(PrivateDirectory&&) = default;

  const std::string& path() const { return path_; }
  int fd() const { return fd_.get(); }
  // Whether the directory itself was made by this Open.
  bool created() const { return created_; }

 private:
  PrivateDirectory(std::string path, UniqueFd fd, bool created)
      : path_(std::move(path)), fd_(std::move(fd)), created_(created) {}

  std::string path_;
  UniqueFd fd_;
  bool created_ = false;
};

// PrivateDirectory::Open without keeping the descriptor. `created`, when given, says whether
// the final directory was made now.
absl::Status EnsurePrivateDirectory(const std::string& path, bool* created = nullptr);

// Removes a socket file a daemon that died left at `path` (nothing there is fine), without
// following a link at any step of the last component. Anything that is not a socket is left
// alone (FAILED_PRECONDITION): ddod never deletes a user's regular file because of a typo in
// --socket. Only the holder of the instance lock may call it.
absl::Status RemoveStaleSocket(const std::string& path);

// The directory part of a path ("/run/ddo/ddod.sock" -> "/run/ddo").
std::string ParentDirectory(const std::string& path);

// The last component of a path ("/run/ddo/ddod.sock" -> "ddod.sock").
std::string LastComponent(const std::string& path);

}  // namespace ddo

#endif  // DDO_DAEMON_COMMON_RUNTIME_DIR_H_
