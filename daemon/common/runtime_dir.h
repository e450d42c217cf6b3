// File: daemon/common/runtime_dir.h
//
// Directories ddod creates for its socket and state: created owner-only (0700) when missing,
// and refused when they exist but belong to someone else or are writable by others, so that
// nobody can swap the socket under a client.
#ifndef DDO_DAEMON_COMMON_RUNTIME_DIR_H_
#define DDO_DAEMON_COMMON_RUNTIME_DIR_H_

#include <string>

#include "absl/status/status.h"

namespace ddo {

// mkdir -p with mode 0700 for the directories it creates; checks the final directory's owner
// and permissions. `created`, when given, says whether the final directory was made now.
absl::Status EnsurePrivateDirectory(const std::string& path, bool* created = nullptr);

// Removes a socket file a daemon that died left at `path` (nothing there is fine). Anything
// that is not a socket is left alone (FAILED_PRECONDITION): ddod never deletes a user's
// regular file because of a typo in --socket. Only the holder of the instance lock may call it.
absl::Status RemoveStaleSocket(const std::string& path);

// The directory part of a path ("/run/ddo/ddod.sock" -> "/run/ddo").
std::string ParentDirectory(const std::string& path);

}  // namespace ddo

#endif  // DDO_DAEMON_COMMON_RUNTIME_DIR_H_
