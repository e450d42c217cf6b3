// File: proto/wire/include/ddo/wire/file_tree.h
//
// Removing a directory tree and making a path absolute, with POSIX calls only. The C++ client
// shares its process with libtorch, and torch's wheels export their own copy of
// std::filesystem's symbols (built with an older toolchain): a call to
// std::filesystem::remove_all from the client then binds to torch's copy and crashed on the GPU
// machine (torch 2.11). The client, and the tests linked with it, use these instead.
//
// Thread-safety: any thread; POSIX calls only, no state (RemoveTree must not race with another
// thread writing the same tree).
#ifndef DDO_WIRE_FILE_TREE_H_
#define DDO_WIRE_FILE_TREE_H_

#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <unistd.h>

#include <string>

namespace ddo {

// Removes `path` and everything under it, not following symbolic links; true when nothing is
// left. A missing path is success.
inline bool RemoveTree(const std::string& path) {
  if (path.empty()) return true;
  auto remove_one = [](const char* name, const struct stat*, int, struct FTW*) {
    return ::remove(name) == 0 || errno == ENOENT ? 0 : -1;
  };
  return ::nftw(path.c_str(), remove_one, 16, FTW_DEPTH | FTW_PHYS) == 0 || errno == ENOENT;
}

// `path` made absolute against the working directory (not resolving links, like
// std::filesystem::absolute); `path` unchanged when the working directory is unknown.
inline std::string AbsolutePath(const std::string& path) {
  if (path.empty() || path.front() == '/') return path;
  char cwd[PATH_MAX];
  if (::getcwd(cwd, sizeof cwd) == nullptr) return path;
  return std::string(cwd) + "/" + path;
}

}  // namespace ddo

#endif  // DDO_WIRE_FILE_TREE_H_
