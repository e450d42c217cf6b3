#include "ddo/wire/daemon_checks.h"

#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "ddo/wire/daemon_address.h"

namespace ddo {
namespace {

// The state column of a listening socket in /proc/net/tcp.
constexpr char kTcpListen[] = "0A";

std::string Mode(const struct stat& info) {
  return absl::StrFormat("%04o", info.st_mode & 07777);
}

std::string DirectoryOf(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

}  // namespace

std::set<uid_t> TrustedDaemonUids(const std::string& service_user) {
  std::set<uid_t> trusted{::geteuid(), 0};
  const std::string name = service_user.empty() ? "ddo" : service_user;
  passwd entry{};
  passwd* found = nullptr;
  char buffer[4096];
  if (::getpwnam_r(name.c_str(), &entry, buffer, sizeof(buffer), &found) == 0 &&
      found != nullptr) {
    trusted.insert(found->pw_uid);
  }
  return trusted;
}

std::set<uid_t> TrustedDaemonUidsFromEnvironment() {
  const char* service_user = std::getenv("DDO_SERVICE_USER");
  return TrustedDaemonUids(service_user != nullptr ? service_user : "");
}

absl::Status CheckSocketLocation(const std::string& socket_path, const std::set<uid_t>& trusted) {
  const std::string directory = DirectoryOf(socket_path);
  struct stat info {};
  if (::lstat(directory.c_str(), &info) != 0 || !S_ISDIR(info.st_mode)) {
    return absl::PermissionDeniedError(absl::StrCat(directory, " is not a directory"));
  }
  if (directory == PerUserDirectory(::geteuid())) {
    if (absl::Status own = CheckPerUserDirectory(directory, ::geteuid()); !own.ok()) return own;
  }
  if (trusted.count(info.st_uid) == 0 || (info.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return absl::PermissionDeniedError(absl::StrCat(
        directory, " (owner uid ", info.st_uid, ", mode ", Mode(info),
        ") could hold a socket another user put there: the directory of ddod's socket must "
        "belong to a trusted user (", absl::StrJoin(trusted, ", "),
        ") and be writable by it only"));
  }
  if (::lstat(socket_path.c_str(), &info) != 0 || !S_ISSOCK(info.st_mode)) {
    return absl::PermissionDeniedError(absl::StrCat(socket_path, " is not a socket"));
  }
  if (trusted.count(info.st_uid) == 0) {
    return absl::PermissionDeniedError(absl::StrCat(
        socket_path, " belongs to uid ", info.st_uid, ", not to a user this client trusts (",
        absl::StrJoin(trusted, ", "), ")"));
  }
  return absl::OkStatus();
}

absl::Status CheckPerUserDirectory(const std::string& directory, uid_t uid) {
  struct stat info {};
  if (::lstat(directory.c_str(), &info) != 0) {
    return absl::PermissionDeniedError(absl::StrCat("cannot check ", directory));
  }
  if (!S_ISDIR(info.st_mode) || info.st_uid != uid || (info.st_mode & 07777) != 0700) {
    return absl::PermissionDeniedError(absl::StrCat(
        "refusing the daemon socket directory ", directory, ": it is ",
        S_ISDIR(info.st_mode) ? "a directory" : "not a directory", " owned by uid ",
        info.st_uid, " with mode ", Mode(info), ", but it must be a directory owned by you (uid ",
        uid, ") with mode 0700: another user may have created it to impersonate your ddod. "
        "Remove it (as root if need be: rm -r ", directory, ") and start your ddod again, or "
        "set XDG_RUNTIME_DIR to a directory only you own"));
  }
  return absl::OkStatus();
}

absl::Status CheckPerUserDirectoryOf(const std::string& socket_path) {
  const std::string directory = DirectoryOf(socket_path);
  struct stat info {};
  if (directory != PerUserDirectory(::geteuid()) || ::lstat(directory.c_str(), &info) != 0) {
    return absl::OkStatus();
  }
  return CheckPerUserDirectory(directory, ::geteuid());
}

std::vector<std::string> DefaultTcpTables() { return {"/proc/net/tcp", "/proc/net/tcp6"}; }

std::set<uid_t> TcpListenerOwners(int port, const std::vector<std::string>& tables) {
  std::set<uid_t> owners;
  for (const std::string& table : tables) {
    std::ifstream rows(table);
    std::string row;
    std::getline(rows, row);  // the header
    while (std::getline(rows, row)) {
      // "sl local_address rem_address st ... uid": local_address is ADDR:PORT in hex.
      const std::vector<absl::string_view> fields =
          absl::StrSplit(row, ' ', absl::SkipWhitespace());
      if (fields.size() <= 7 || fields[3] != kTcpListen) continue;
      const size_t colon = fields[1].rfind(':');
      int listening = 0;
      uint32_t owner = 0;
      if (colon == absl::string_view::npos ||
          !absl::SimpleHexAtoi(fields[1].substr(colon + 1), &listening) ||
          !absl::SimpleAtoi(fields[7], &owner)) {
        continue;
      }
      if (listening == port) owners.insert(owner);
    }
  }
  return owners;
}

absl::Status CheckTcpListener(const std::string& target, int port,
                              const std::set<uid_t>& trusted,
                              const std::vector<std::string>& tables) {
  const std::set<uid_t> owners = TcpListenerOwners(port, tables);
  if (owners.empty()) {
    return absl::PermissionDeniedError(absl::StrCat(
        "refusing the daemon at ", target, ": no listener on port ", port,
        " is visible in /proc/net/tcp, so its owner cannot be checked"));
  }
  std::set<uid_t> strangers;
  for (uid_t owner : owners) {
    if (trusted.count(owner) == 0) strangers.insert(owner);
  }
  if (!strangers.empty()) {
    return absl::PermissionDeniedError(absl::StrCat(
        "refusing the daemon at ", target, ": port ", port, " is held by uid ",
        absl::StrJoin(strangers, ", "), ", and this client trusts only uid ",
        absl::StrJoin(trusted, ", "), "; another user may be impersonating ddod"));
  }
  return absl::OkStatus();
}

}  // namespace ddo
