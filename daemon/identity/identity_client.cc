#include "daemon/identity/identity_client.h"

#include <pwd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "daemon/common/display_text.h"
#include "daemon/common/posix_error.h"
#include "daemon/identity/identity_protocol.h"
#include "daemon/identity/seqpacket.h"

namespace ddo {

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

absl::Status CheckSocketLocation(const std::string& socket_path, const std::set<uid_t>& trusted) {
  const size_t slash = socket_path.find_last_of('/');
  const std::string directory =
      slash == std::string::npos ? "." : (slash == 0 ? "/" : socket_path.substr(0, slash));
  struct stat info {};
  if (::lstat(directory.c_str(), &info) != 0 || !S_ISDIR(info.st_mode)) {
    return absl::PermissionDeniedError(absl::StrCat(directory, " is not a directory"));
  }
  if (trusted.count(info.st_uid) == 0 || (info.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return absl::PermissionDeniedError(absl::StrCat(
        directory, " (owner uid ", info.st_uid, ", mode ", absl::StrFormat("%04o", info.st_mode & 07777),
        ") could hold a socket another user put there: the directory of ddod's socket must "
        "belong to a trusted user (", absl::StrJoin(trusted, ", "), ") and be writable by it only"));
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

absl::StatusOr<IdentityLink> IdentityLink::Connect(const std::string& path,
                                                   const std::set<uid_t>& trusted) {
  IdentityLink link;
  link.socket_ = UniqueFd(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  if (!link.socket_.valid()) return PosixError("socket(AF_UNIX, SOCK_SEQPACKET)", errno);
  sockaddr_un address{};
  if (path.size() >= sizeof(address.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat("identity socket path too long: ", path));
  }
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  if (::connect(link.socket_.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    return absl::UnavailableError(absl::StrCat("cannot reach ddod's identity socket ", path, ": ",
                                               std::strerror(errno)));
  }
  absl::StatusOr<PeerCredentials> peer = PeerCredentialsOf(link.socket_.get());
  if (!peer.ok()) return peer.status();
  if (trusted.count(peer->uid) == 0) {
    return absl::PermissionDeniedError(absl::StrCat(
        "the daemon at ", path, " runs as uid ", peer->uid, ", not as a user this client trusts (",
        absl::StrJoin(trusted, ", "),
        "): another user may have started it to impersonate ddod; refusing to use it"));
  }
  // The listener may not be the server (socket activation: systemd listened, ddod answers).
  // The kernel attaches the answering process's credentials to HELLO's answer; it must be
  // trusted too, and it is the daemon.
  const int pass_credentials = 1;
  if (::setsockopt(link.socket_.get(), SOL_SOCKET, SO_PASSCRED, &pass_credentials,
                   sizeof(pass_credentials)) != 0) {
    return PosixError("setsockopt(SO_PASSCRED)", errno);
  }
  std::optional<PeerCredentials> answered_by;
  absl::StatusOr<std::string> token = link.Ask("HELLO 1", -1, nullptr, &answered_by);
  if (!token.ok()) return token.status();
  const int no_credentials = 0;
  ::setsockopt(link.socket_.get(), SOL_SOCKET, SO_PASSCRED, &no_credentials,
               sizeof(no_credentials));
  if (!answered_by.has_value()) {
    return absl::FailedPreconditionError(
        "ddod's answer to HELLO came without its sender's credentials");
  }
  if (trusted.count(answered_by->uid) == 0) {
    return absl::PermissionDeniedError(absl::StrCat(
        "the socket ", path, " is uid ", peer->uid, "'s, but the process that answers on it (pid ",
        answered_by->pid, ") runs as uid ", answered_by->uid,
        ", not as a user this client trusts (", absl::StrJoin(trusted, ", "),
        "); refusing to use it"));
  }
  link.daemon_uid_ = answered_by->uid;
  if (token->size() != 32) {
    return absl::FailedPreconditionError("ddod answered HELLO without a token");
  }
  link.token_ = *std::move(token);
  return link;
}

absl::StatusOr<uint64_t> IdentityLink::PassFile(const std::string& base_name, int fd) {
  absl::StatusOr<std::string> answer = Ask(absl::StrCat("FILE ", base_name), fd, nullptr);
  if (!answer.ok()) return answer.status();
  uint64_t handle = 0;
  if (!absl::SimpleAtoi(*answer, &handle) || handle == 0) {
    return absl::FailedPreconditionError("ddod answered FILE without a handle");
  }
  return handle;
}

absl::StatusOr<UniqueFd> IdentityLink::OpenSegment(const std::string& shm_name, bool writable) {
  UniqueFd received;
  absl::StatusOr<std::string> answer =
      Ask(absl::StrCat("OPEN ", shm_name, writable ? " rw" : " ro"), -1, &received);
  if (!answer.ok()) return answer.status();
  if (!received.valid()) return absl::FailedPreconditionError("ddod answered OPEN without a descriptor");
  return received;
}

absl::StatusOr<std::string> IdentityLink::Ask(const std::string& request, int fd,
                                              UniqueFd* received,
                                              std::optional<PeerCredentials>* sender) {
  if (!SendPacket(socket_.get(), request, fd)) {
    return absl::UnavailableError("the identity socket closed");
  }
  absl::StatusOr<Packet> answer = ReceivePacket(socket_.get(), kIdentityMaxPacketBytes);
  if (!answer.ok()) return absl::UnavailableError(absl::StrCat("identity socket: ",
                                                               answer.status().message()));
  if (received != nullptr && !answer->fds.empty()) *received = std::move(answer->fds.front());
  if (sender != nullptr) *sender = answer->sender;
  const std::string& text = answer->text;
  if (text == "OK") return std::string();
  if (text.rfind("OK ", 0) == 0) return text.substr(3);
  if (text.rfind("ERR ", 0) == 0) {
    return absl::FailedPreconditionError(absl::StrCat("ddod: ", text.substr(4)));
  }
  return absl::FailedPreconditionError(
      absl::StrCat("unexpected identity answer '", EscapeForDisplay(text), "'"));
}

}  // namespace ddo
