// File: daemon/profiles/profile_store.cc
#include "daemon/profiles/profile_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <memory>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "daemon/common/logging.h"
#include "daemon/common/random_id.h"
#include "daemon/common/status_macros.h"
#include "ddo/wire/display_text.h"
#include "ddo/wire/posix_error.h"
#include "nlohmann/json.hpp"

namespace ddo {
namespace {

namespace fs = std::filesystem;

constexpr char kPrefix[] = "ddo-capacity-v1-";
constexpr char kSuffix[] = ".json";
constexpr size_t kKeyLength = 24;
// Temporary files: a dot name that never matches the profile pattern, 128 random bits inside.
constexpr char kTemporaryPrefix[] = ".ddo-profile-";
constexpr char kTemporarySuffix[] = ".tmp";
// Paths quoted in messages are cut here (keys at EscapeForDisplay's default).
constexpr size_t kMaxQuotedPath = 200;

std::string FileName(const std::string& key) { return absl::StrCat(kPrefix, key, kSuffix); }

// The key in `name` when it is a profile's file name, else "".
std::string KeyOfFileName(absl::string_view name) {
  if (!absl::ConsumePrefix(&name, kPrefix) || !absl::ConsumeSuffix(&name, kSuffix)) return "";
  return CheckProfileKey(std::string(name)).ok() ? std::string(name) : "";
}

int64_t ModifiedMs(const struct stat& info) {
  return static_cast<int64_t>(info.st_mtim.tv_sec) * 1000 + info.st_mtim.tv_nsec / 1000000;
}

// The record's context name, or "" (capacity profiles have no name).
std::string ContextName(const nlohmann::json& record) {
  auto context = record.find("context");
  if (context == record.end() || !context->is_object()) return "";
  auto name = context->find("name");
  return name != context->end() && name->is_string() ? name->get<std::string>() : "";
}

// An opened directory may hold profiles when it is a directory of ddod's user that nobody else
// can write to (others could otherwise rename entries in and out of it).
absl::Status CheckDirectory(int fd, const std::string& where, uid_t owner) {
  struct stat info {};
  if (::fstat(fd, &info) != 0) return PosixError(absl::StrCat("stat ", where), errno);
  if (!S_ISDIR(info.st_mode)) {
    return absl::PermissionDeniedError(absl::StrCat(where, " is not a directory: refused"));
  }
  if (info.st_uid != owner) {
    return absl::PermissionDeniedError(absl::StrCat(where, " belongs to uid ", info.st_uid,
                                                    ", not to ddod's uid ", owner, ": refused"));
  }
  if ((info.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return absl::PermissionDeniedError(absl::StrCat(
        where, " is writable by its group or others: refused (ddod changes no modes)"));
  }
  return absl::OkStatus();
}

// `name` inside `parent` as a directory, never through a symlink; created 0700 first when
// `create`. An invalid descriptor when it is missing and `create` is false.
absl::StatusOr<UniqueFd> OpenChildDirectory(int parent, const std::string& name, bool create,
                                            const std::string& where, uid_t owner) {
  // mkdirat does not follow a symlink planted at `name` either: it answers EEXIST.
  if (create && ::mkdirat(parent, name.c_str(), 0700) != 0 && errno != EEXIST) {
    return PosixError(absl::StrCat("create ", where), errno);
  }
  UniqueFd directory(
      ::openat(parent, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!directory.valid()) {
    const int error = errno;
    if (error == ENOENT && !create) return UniqueFd();
    if (error == ELOOP || error == ENOTDIR) {
      return absl::PermissionDeniedError(
          absl::StrCat(where, " is a symbolic link or not a directory: refused"));
    }
    return PosixError(absl::StrCat("open ", where), error);
  }
  DDO_RETURN_IF_ERROR(CheckDirectory(directory.get(), where, owner));
  return directory;
}

// The directory `path` (absolute), its last component opened without following a symlink.
// Missing directories on the way are created 0700 when `create`; otherwise a missing one gives
// an invalid descriptor. The parents are ddod's configuration or the path of a caller running
// as ddod's own user, so they may be symlinks.
absl::StatusOr<UniqueFd> OpenDirectoryPath(const std::string& path, bool create,
                                           const std::string& where, uid_t owner) {
  if (path.empty() || path.front() != '/' || path.size() >= PATH_MAX ||
      path.find('\0') != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("profile directory ", where, " must be an absolute path"));
  }
  fs::path normal = fs::path(path).lexically_normal();
  if (!normal.has_filename()) normal = normal.parent_path();  // "/a/b/" is "/a/b"
  if (normal == normal.root_path()) {
    return absl::InvalidArgumentError(
        absl::StrCat("profile directory ", where, " cannot be the root directory"));
  }
  const fs::path parent = normal.parent_path();
  UniqueFd parent_fd(::open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!parent_fd.valid() && errno == ENOENT && create) {
    fs::path partial;
    for (const fs::path& part : parent) {
      partial /= part;
      if (::mkdir(partial.c_str(), 0700) != 0 && errno != EEXIST) {
        return PosixError(
            absl::StrCat("create ", EscapeForDisplay(partial.string(), kMaxQuotedPath)), errno);
      }
    }
    parent_fd.Reset(::open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  }
  if (!parent_fd.valid()) {
    const int error = errno;
    if (error == ENOENT && !create) return UniqueFd();
    return PosixError(absl::StrCat("open ", EscapeForDisplay(parent.string(), kMaxQuotedPath)),
                      error);
  }
  return OpenChildDirectory(parent_fd.get(), normal.filename().string(), create, where, owner);
}

// The keys of the profile files in `directory`; with `regular_only`, entries the directory
// says are not regular files (directories, symlinks, FIFOs, sockets, devices) are left out.
absl::StatusOr<std::vector<std::string>> KeysIn(int directory, const std::string& where,
                                                bool regular_only) {
  // A new open file description: its offset is this listing's own, whoever else lists.
  const int fd = ::openat(directory, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return PosixError(absl::StrCat("list ", where), errno);
  std::unique_ptr<DIR, int (*)(DIR*)> listing(::fdopendir(fd), &::closedir);
  if (listing == nullptr) {
    const int error = errno;
    ::close(fd);
    return PosixError(absl::StrCat("list ", where), error);
  }
  std::vector<std::string> keys;
  while (true) {
    errno = 0;
    const dirent* entry = ::readdir(listing.get());
    if (entry == nullptr) {
      if (errno != 0) return PosixError(absl::StrCat("list ", where), errno);
      break;
    }
    if (regular_only && entry->d_type != DT_REG && entry->d_type != DT_UNKNOWN) continue;
    std::string key = KeyOfFileName(entry->d_name);
    if (!key.empty()) keys.push_back(std::move(key));
  }
  std::sort(keys.begin(), keys.end());
  return keys;
}

// Reads `key`'s file in `directory`. Nothing but a regular file owned by `owner` with one link
// (a hard link could be any file of that owner's) and at most kMaxProfileBytes is read.
absl::StatusOr<ProfileFile> Load(int directory, const std::string& key, const std::string& where,
                                 uid_t owner) {
  const std::string about = absl::StrCat("profile ", key, " in ", where);
  // O_NONBLOCK: opening a FIFO planted here must not wait for a writer.
  UniqueFd file(::openat(directory, FileName(key).c_str(),
                         O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
  if (!file.valid()) {
    const int error = errno;
    if (error == ENOENT) return absl::NotFoundError(absl::StrCat("no ", about));
    if (error == ELOOP) {
      return absl::PermissionDeniedError(absl::StrCat(about, " is a symbolic link: refused"));
    }
    return PosixError(absl::StrCat("open ", about), error);
  }
  struct stat info {};
  if (::fstat(file.get(), &info) != 0) return PosixError(absl::StrCat("stat ", about), errno);
  if (!S_ISREG(info.st_mode)) {
    return absl::PermissionDeniedError(absl::StrCat(about, " is not a regular file: refused"));
  }
  if (info.st_uid != owner) {
    return absl::PermissionDeniedError(
        absl::StrCat(about, " does not belong to ddod's uid ", owner, ": refused"));
  }
  if (info.st_nlink != 1) {
    return absl::PermissionDeniedError(absl::StrCat(about, " has other hard links: refused"));
  }
  const auto too_large = [&] {
    return absl::FailedPreconditionError(
        absl::StrCat(about, " is larger than ", kMaxProfileBytes, " bytes: refused"));
  };
  if (info.st_size < 0 || static_cast<uint64_t>(info.st_size) > kMaxProfileBytes) {
    return too_large();
  }
  // Read until the end, but never more than one byte past the limit: the file may have grown.
  std::string text;
  text.reserve(static_cast<size_t>(info.st_size));
  char chunk[64 * 1024];
  while (true) {
    const ssize_t n = ::read(file.get(), chunk, sizeof(chunk));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return PosixError(absl::StrCat("read ", about), errno);
    if (n == 0) break;
    text.append(chunk, static_cast<size_t>(n));
    if (text.size() > kMaxProfileBytes) return too_large();
  }
  nlohmann::json record = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (record.is_discarded() || !record.is_object()) {
    return absl::DataLossError(absl::StrCat(about, " is not a JSON object: ignored"));
  }
  ProfileFile profile{key, ContextName(record), std::move(text), ModifiedMs(info)};
  return profile;
}

// Writes all of `text` to `fd`.
absl::Status WriteAll(int fd, absl::string_view text, const std::string& about) {
  while (!text.empty()) {
    const ssize_t n = ::write(fd, text.data(), text.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return PosixError(absl::StrCat("write ", about), errno);
    text.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

}  // namespace

std::string ResolveProfileDir(const std::string& requested, const std::string& environment_dir,
                              const std::string& home) {
  std::string dir = !requested.empty()         ? requested
                    : !environment_dir.empty() ? environment_dir
                                               : "~/.ddo/profiles";
  if (dir == "~" || absl::StartsWith(dir, "~/")) dir = home + dir.substr(1);
  return dir;
}

absl::Status CheckProfileKey(const std::string& key) {
  bool hex = key.size() == kKeyLength;
  for (char c : key) hex = hex && ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'));
  if (!hex) {
    return absl::InvalidArgumentError(absl::StrCat("profile key \"", EscapeForDisplay(key),
                                                   "\" must be 24 lowercase hex digits (the file ",
                                                   kPrefix, "<key>", kSuffix, ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<ProfileStore> ProfileStore::ForUser(const std::string& root, uid_t uid,
                                                   IfMissing if_missing) {
  const uid_t owner = ::geteuid();
  const bool create = if_missing == IfMissing::kCreate;
  const std::string root_where = EscapeForDisplay(root, kMaxQuotedPath);
  DDO_ASSIGN_OR_RETURN(UniqueFd root_fd, OpenDirectoryPath(root, create, root_where, owner));
  const std::string where = absl::StrCat(root_where, "/", uid);
  if (!root_fd.valid()) return ProfileStore(UniqueFd(), where, owner);
  DDO_ASSIGN_OR_RETURN(UniqueFd directory, OpenChildDirectory(root_fd.get(), std::to_string(uid),
                                                              create, where, owner));
  return ProfileStore(std::move(directory), where, owner);
}

absl::StatusOr<ProfileStore> ProfileStore::ForDirectory(const std::string& path,
                                                        IfMissing if_missing) {
  const uid_t owner = ::geteuid();
  const std::string where = EscapeForDisplay(path, kMaxQuotedPath);
  DDO_ASSIGN_OR_RETURN(UniqueFd directory,
                       OpenDirectoryPath(path, if_missing == IfMissing::kCreate, where, owner));
  return ProfileStore(std::move(directory), where, owner);
}

absl::StatusOr<std::vector<ProfileFile>> ProfileStore::List() const {
  std::vector<ProfileFile> files;
  if (!directory_.valid()) return files;
  DDO_ASSIGN_OR_RETURN(std::vector<std::string> keys,
                       KeysIn(directory_.get(), description_, /*regular_only=*/true));
  size_t listed_bytes = 0;
  for (const std::string& key : keys) {
    // Sized before it is read: what would not fit the listing is never loaded.
    struct stat info {};
    if (::fstatat(directory_.get(), FileName(key).c_str(), &info, AT_SYMLINK_NOFOLLOW) == 0 &&
        listed_bytes + static_cast<size_t>(std::max<off_t>(info.st_size, 0)) > kMaxStoreBytes) {
      Logger("profiles")->warn("{} holds more than {} bytes of profiles: listing the first {}",
                               description_, kMaxStoreBytes, files.size());
      break;
    }
    absl::StatusOr<ProfileFile> file = Load(directory_.get(), key, description_, owner_);
    if (!file.ok()) {
      Logger("profiles")->warn("{}", file.status().message());
      continue;
    }
    listed_bytes += file->json.size();
    files.push_back(*std::move(file));
  }
  return files;
}

absl::StatusOr<ProfileFile> ProfileStore::Get(const std::string& key) const {
  DDO_RETURN_IF_ERROR(CheckProfileKey(key));
  if (!directory_.valid()) {
    return absl::NotFoundError(absl::StrCat("no profile ", key, " in ", description_));
  }
  return Load(directory_.get(), key, description_, owner_);
}

absl::StatusOr<ProfileFile> ProfileStore::Put(const std::string& key,
                                              const std::string& json) const {
  DDO_RETURN_IF_ERROR(CheckProfileKey(key));
  const bool needs_newline = json.empty() || json.back() != '\n';
  if (json.size() + (needs_newline ? 1 : 0) > kMaxProfileBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("profile ", key, ": the text is larger than ", kMaxProfileBytes, " bytes"));
  }
  nlohmann::json record = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (record.is_discarded() || !record.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("profile ", key, ": the text is not a JSON object"));
  }
  auto stored_key = record.find("profile_key");
  if (stored_key == record.end() || !stored_key->is_string() || *stored_key != key) {
    return absl::InvalidArgumentError(
        absl::StrCat("profile ", key, ": its \"profile_key\" must be \"", key, "\""));
  }
  if (!directory_.valid()) {
    return absl::FailedPreconditionError(absl::StrCat(
        description_, " was missing and opened without IfMissing::kCreate: cannot store ", key));
  }
  const std::string target = FileName(key);
  const std::string about = absl::StrCat("profile ", key, " in ", description_);
  DDO_ASSIGN_OR_RETURN(std::vector<std::string> keys,
                       KeysIn(directory_.get(), description_, /*regular_only=*/false));
  size_t other_bytes = 0;
  for (const std::string& other : keys) {
    struct stat info {};
    if (other != key &&
        ::fstatat(directory_.get(), FileName(other).c_str(), &info, AT_SYMLINK_NOFOLLOW) == 0) {
      other_bytes += static_cast<size_t>(std::max<off_t>(info.st_size, 0));
    }
  }
  if (other_bytes + json.size() + (needs_newline ? 1 : 0) > kMaxStoreBytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        description_, " holds ", other_bytes, " bytes of other profiles; with ", key,
        " it would pass the ", kMaxStoreBytes, " bytes ddod keeps (delete some first)"));
  }
  struct stat existing {};
  if (::fstatat(directory_.get(), target.c_str(), &existing, AT_SYMLINK_NOFOLLOW) != 0) {
    if (keys.size() >= kMaxProfilesPerStore) {
      return absl::ResourceExhaustedError(
          absl::StrCat(description_, " already holds ", keys.size(),
                       " profiles, the most ddod keeps: cannot add ", key, " (delete one first)"));
    }
  }

  // A fresh name nobody can predict, created exclusively: nothing planted here is opened.
  const std::string temporary = absl::StrCat(kTemporaryPrefix, RandomId(), kTemporarySuffix);
  UniqueFd file(::openat(directory_.get(), temporary.c_str(),
                         O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!file.valid()) return PosixError(absl::StrCat("create a temporary file for ", about), errno);
  auto remove_temporary =
      absl::MakeCleanup([&] { (void)::unlinkat(directory_.get(), temporary.c_str(), 0); });
  std::string text = json;
  if (needs_newline) text.push_back('\n');
  DDO_RETURN_IF_ERROR(WriteAll(file.get(), text, about));
  // fsync also reports a failed write-back, which close would otherwise be the one to tell.
  if (::fsync(file.get()) != 0) return PosixError(absl::StrCat("sync ", about), errno);
  struct stat written {};
  if (::fstat(file.get(), &written) != 0) return PosixError(absl::StrCat("stat ", about), errno);
  // renameat replaces whatever sits at the target (a symlink too) without following it.
  if (::renameat(directory_.get(), temporary.c_str(), directory_.get(), target.c_str()) != 0) {
    return PosixError(absl::StrCat("replace ", about), errno);
  }
  std::move(remove_temporary).Cancel();
  (void)::fsync(directory_.get());  // the rename itself: best effort
  ProfileFile profile{key, ContextName(record), std::move(text), ModifiedMs(written)};
  return profile;
}

absl::StatusOr<bool> ProfileStore::Delete(const std::string& key) const {
  DDO_RETURN_IF_ERROR(CheckProfileKey(key));
  if (!directory_.valid()) return false;
  // unlinkat removes the entry itself, never what a symlink there points to.
  if (::unlinkat(directory_.get(), FileName(key).c_str(), 0) != 0) {
    if (errno == ENOENT) return false;
    return PosixError(absl::StrCat("remove profile ", key, " in ", description_), errno);
  }
  return true;
}

}  // namespace ddo
