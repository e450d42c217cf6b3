#include "ddo/wire/identity_client.h"

#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ddo/wire/display_text.h"
#include "ddo/wire/identity_protocol.h"
#include "ddo/wire/posix_error.h"
#include "ddo/wire/seqpacket.h"

namespace ddo {

absl::StatusOr<IdentityLink> IdentityLink::Connect(const std::string& path,
                                                   const std::set<uid_t>& trusted,
                                                   int timeout_ms) {
  IdentityLink link;
  link.socket_ = UniqueFd(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  if (!link.socket_.valid()) return PosixError("socket(AF_UNIX, SOCK_SEQPACKET)", errno);
  if (timeout_ms > 0) {
    timeval limit{timeout_ms / 1000, (timeout_ms % 1000) * 1000};
    ::setsockopt(link.socket_.get(), SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof(limit));
    ::setsockopt(link.socket_.get(), SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof(limit));
  }
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
  if (!token.ok() && link.ended_by_peer_) {
    // ddod closes a connection over one of its limits at once, unanswered.
    return absl::ResourceExhaustedError(absl::StrCat(
        "ddod refused the identity connection ", path,
        " (a connection limit? it closed the connection before answering HELLO: this user may "
        "hold too many connections, or ddod too many in all; ddod's log names the limit)"));
  }
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
  if (!received.valid()) {
    return absl::FailedPreconditionError("ddod answered OPEN without a descriptor");
  }
  return received;
}

absl::StatusOr<std::string> IdentityLink::Ask(const std::string& request, int fd,
                                              UniqueFd* received,
                                              std::optional<PeerCredentials>* sender) {
  std::lock_guard<std::mutex> lock(*mutex_);
  if (!socket_.valid()) return absl::UnavailableError("the identity connection is closed");
  if (!SendPacket(socket_.get(), request, fd)) {
    ended_by_peer_ = errno == EPIPE || errno == ECONNRESET || errno == ENOTCONN;
    socket_.Reset();
    return absl::UnavailableError("the identity socket closed");
  }
  absl::StatusOr<Packet> answer = ReceivePacket(socket_.get(), kIdentityMaxPacketBytes);
  // A late, lost or cut answer leaves requests and answers unpaired: the link is given up.
  if (!answer.ok()) {
    // NOT_FOUND: the peer closed; ECONNRESET: it closed with the request unread.
    ended_by_peer_ = absl::IsNotFound(answer.status()) ||
                     absl::EndsWith(answer.status().message(), std::strerror(ECONNRESET));
    socket_.Reset();
    return absl::UnavailableError(absl::StrCat("identity socket: ", answer.status().message()));
  }
  if (answer->would_block) {  // SO_RCVTIMEO ran out
    socket_.Reset();
    return absl::UnavailableError("ddod did not answer on the identity socket in time");
  }
  if (answer->truncated) {
    socket_.Reset();
    return absl::UnavailableError("ddod's identity answer was truncated");
  }
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
