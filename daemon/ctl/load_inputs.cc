#include "daemon/ctl/load_inputs.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <set>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "ddo/wire/display_text.h"
#include "ddo/wire/posix_error.h"

namespace ddo {
namespace {

constexpr char kSafetensors[] = ".safetensors";
constexpr char kIndex[] = ".safetensors.index.json";
// O_NONBLOCK: a FIFO must not block the open (it is refused right after); O_NOCTTY: a terminal
// must not become ddoctl's controlling terminal.
constexpr int kOpenFlags = O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY;

std::string BaseName(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

absl::StatusOr<UniqueFd> OpenAt(int directory, const std::string& name, const std::string& path) {
  UniqueFd fd(::openat(directory, name.c_str(), kOpenFlags));
  if (!fd.valid()) return PosixError(EscapeForDisplay(path), errno);
  return fd;
}

class Collector {
 public:
  absl::Status Add(const std::string& path, UniqueFd fd) {
    struct stat info {};
    if (::fstat(fd.get(), &info) != 0) return PosixError(EscapeForDisplay(path), errno);
    if (!S_ISREG(info.st_mode)) {
      return absl::InvalidArgumentError(
          absl::StrCat(EscapeForDisplay(path), " is not a regular file or a folder"));
    }
    if (!seen_.insert({info.st_dev, info.st_ino}).second) return absl::OkStatus();
    inputs_.files.push_back({BaseName(path), path, std::move(fd)});
    return absl::OkStatus();
  }

  absl::Status AddFolder(const std::string& path, int folder) {
    DIR* listing = ::fdopendir(::dup(folder));
    if (listing == nullptr) return PosixError(EscapeForDisplay(path), errno);
    std::vector<std::string> weights, indexes;
    while (const dirent* entry = ::readdir(listing)) {
      const std::string name = entry->d_name;
      if (name.empty() || name.front() == '.') continue;
      if (absl::EndsWith(name, kIndex)) {
        indexes.push_back(name);
      } else if (absl::EndsWith(name, kSafetensors)) {
        weights.push_back(name);
      }
    }
    ::closedir(listing);
    std::sort(weights.begin(), weights.end());
    size_t added = 0;
    for (const std::string& name : weights) {
      const std::string child = absl::StrCat(path, "/", name);
      absl::StatusOr<UniqueFd> fd = OpenAt(folder, name, child);
      if (!fd.ok()) return fd.status();
      struct stat info {};
      if (::fstat(fd->get(), &info) != 0 || !S_ISREG(info.st_mode)) continue;  // not a file
      if (absl::Status added_file = Add(child, *std::move(fd)); !added_file.ok()) return added_file;
      ++added;
    }
    if (added == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(EscapeForDisplay(path), " holds no *.safetensors file"));
    }
    if (indexes.size() == 1) {
      const std::string child = absl::StrCat(path, "/", indexes.front());
      absl::StatusOr<UniqueFd> fd = OpenAt(folder, indexes.front(), child);
      if (!fd.ok()) return fd.status();
      if (!inputs_.index.empty()) {
        return absl::InvalidArgumentError("several index files apply: load one folder at a time");
      }
      inputs_.index.push_back({indexes.front(), child, *std::move(fd)});
    }
    return absl::OkStatus();
  }

  LoadInputs Take() && { return std::move(inputs_); }

 private:
  LoadInputs inputs_;
  std::set<std::pair<dev_t, ino_t>> seen_;
};

}  // namespace

absl::StatusOr<LoadInputs> OpenLoadInputs(const std::vector<std::string>& paths) {
  if (paths.empty()) return absl::InvalidArgumentError("load needs a file or a model folder");
  Collector collector;
  for (const std::string& path : paths) {
    absl::StatusOr<UniqueFd> fd = OpenAt(AT_FDCWD, path, path);
    if (!fd.ok()) return fd.status();
    struct stat info {};
    if (::fstat(fd->get(), &info) != 0) return PosixError(EscapeForDisplay(path), errno);
    absl::Status added = S_ISDIR(info.st_mode) ? collector.AddFolder(path, fd->get())
                                               : collector.Add(path, *std::move(fd));
    if (!added.ok()) return added;
  }
  return std::move(collector).Take();
}

}  // namespace ddo
