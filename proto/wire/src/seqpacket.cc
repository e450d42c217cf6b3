#include "ddo/wire/seqpacket.h"

#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "ddo/wire/posix_error.h"

namespace ddo {
namespace {

// Room for a few descriptors: a peer that sends more than one gets them all closed.
constexpr size_t kMaxDescriptorsRoom = 4;

}  // namespace

bool SendPacket(int socket, const std::string& text, int fd, int flags) {
  iovec data{const_cast<char*>(text.data()), text.size()};
  msghdr message{};
  message.msg_iov = &data;
  message.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  if (fd >= 0) {
    message.msg_control = control;
    message.msg_controllen = sizeof(control);
    cmsghdr* header = CMSG_FIRSTHDR(&message);
    header->cmsg_level = SOL_SOCKET;
    header->cmsg_type = SCM_RIGHTS;
    header->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(header), &fd, sizeof(int));
  }
  ssize_t sent;
  do {
    sent = ::sendmsg(socket, &message, MSG_NOSIGNAL | flags);
  } while (sent < 0 && errno == EINTR);
  return sent == static_cast<ssize_t>(text.size());
}

absl::StatusOr<Packet> ReceivePacket(int socket, size_t max_bytes, int flags) {
  Packet packet;
  packet.text.resize(max_bytes);
  iovec data{packet.text.data(), packet.text.size()};
  msghdr message{};
  message.msg_iov = &data;
  message.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxDescriptorsRoom) +
                                CMSG_SPACE(sizeof(ucred))] = {};
  message.msg_control = control;
  message.msg_controllen = sizeof(control);
  ssize_t received;
  do {
    received = ::recvmsg(socket, &message, MSG_CMSG_CLOEXEC | flags);
  } while (received < 0 && errno == EINTR);
  if (received < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
    packet.text.clear();
    packet.would_block = true;
    return packet;
  }
  if (received < 0) return PosixError("recvmsg", errno);
  // Own every descriptor that came before anything else can fail.
  for (cmsghdr* header = CMSG_FIRSTHDR(&message); header != nullptr;
       header = CMSG_NXTHDR(&message, header)) {
    if (header->cmsg_level != SOL_SOCKET) continue;
    if (header->cmsg_type == SCM_CREDENTIALS && header->cmsg_len >= CMSG_LEN(sizeof(ucred))) {
      ucred credentials{};
      std::memcpy(&credentials, CMSG_DATA(header), sizeof(credentials));
      packet.sender = PeerCredentials{credentials.uid, credentials.gid, credentials.pid};
      continue;
    }
    if (header->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (header->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int fd = -1;
      std::memcpy(&fd, CMSG_DATA(header) + i * sizeof(int), sizeof(int));
      packet.fds.emplace_back(fd);
    }
  }
  if (received == 0 && packet.fds.empty()) {
    return absl::NotFoundError("the peer closed the connection");
  }
  packet.text.resize(static_cast<size_t>(received));
  packet.truncated = (message.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0;
  return packet;
}

absl::StatusOr<PeerCredentials> PeerCredentialsOf(int socket) {
  ucred credentials{};
  socklen_t length = sizeof(credentials);
  if (::getsockopt(socket, SOL_SOCKET, SO_PEERCRED, &credentials, &length) != 0) {
    return PosixError("getsockopt(SO_PEERCRED)", errno);
  }
  return PeerCredentials{credentials.uid, credentials.gid, credentials.pid};
}

}  // namespace ddo
