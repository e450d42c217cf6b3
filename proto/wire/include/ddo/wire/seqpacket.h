// File: proto/wire/include/ddo/wire/seqpacket.h
//
// One packet at a time on a SOCK_SEQPACKET Unix socket, with descriptors (SCM_RIGHTS): what
// both ends of the identity socket send and receive.
//
// Thread-safety: functions of their arguments; a socket is used by one thread at a time.
#ifndef DDO_WIRE_SEQPACKET_H_
#define DDO_WIRE_SEQPACKET_H_

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ddo/wire/unique_fd.h"

namespace ddo {

// Sends `text` as one packet, with descriptor `fd` when >= 0. `flags` are added to
// MSG_NOSIGNAL (ddod passes MSG_DONTWAIT). False when the packet did not go whole.
bool SendPacket(int socket, const std::string& text, int fd = -1, int flags = 0);

// The uid, gid and pid of a process, from the kernel.
struct PeerCredentials {
  uid_t uid = 0;
  gid_t gid = 0;
  pid_t pid = 0;
};

struct Packet {
  std::string text;
  std::vector<UniqueFd> fds;  // every descriptor that came, owned
  // The sender's credentials, attached by the kernel when the receiving socket has
  // SO_PASSCRED set (SCM_CREDENTIALS).
  std::optional<PeerCredentials> sender;
  bool truncated = false;     // longer than the buffer, or more descriptors than room
  bool would_block = false;   // MSG_DONTWAIT and nothing waiting: no packet
};

// Receives one packet of at most `max_bytes`. NOT_FOUND when the peer closed the connection;
// errno's words on other failures; `would_block` when MSG_DONTWAIT found nothing.
absl::StatusOr<Packet> ReceivePacket(int socket, size_t max_bytes, int flags = 0);

// The process at the other end of a connected socket: the one that called connect() or
// listen() (SO_PEERCRED). Under socket activation that is systemd, not the server.
absl::StatusOr<PeerCredentials> PeerCredentialsOf(int socket);

}  // namespace ddo

#endif  // DDO_WIRE_SEQPACKET_H_
