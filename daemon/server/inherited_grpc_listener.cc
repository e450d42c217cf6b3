#include "daemon/server/inherited_grpc_listener.h"

#include <fcntl.h>
#include <grpcpp/server_posix.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

#include "daemon/common/logging.h"
#include "daemon/common/posix_error.h"

namespace ddo {

absl::StatusOr<std::unique_ptr<InheritedGrpcListener>> InheritedGrpcListener::Start(
    UniqueFd listener, grpc::Server& server) {
  // Non-blocking, so that a connection that vanished between poll and accept blocks nothing.
  const int flags = ::fcntl(listener.get(), F_GETFL);
  if (flags < 0 || ::fcntl(listener.get(), F_SETFL, flags | O_NONBLOCK) != 0) {
    return PosixError("fcntl O_NONBLOCK on the inherited gRPC socket", errno);
  }
  std::unique_ptr<InheritedGrpcListener> accepting(
      new InheritedGrpcListener(std::move(listener), server));
  accepting->wake_ = UniqueFd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!accepting->wake_.valid()) return PosixError("eventfd", errno);
  accepting->thread_ = std::thread([raw = accepting.get()] { raw->Run(); });
  return accepting;
}

InheritedGrpcListener::~InheritedGrpcListener() { Stop(); }

void InheritedGrpcListener::Stop() {
  if (!thread_.joinable()) return;
  const uint64_t one = 1;
  (void)!::write(wake_.get(), &one, sizeof(one));
  thread_.join();
  listener_.Reset();
}

void InheritedGrpcListener::Run() {
  auto log = Logger("server");
  while (true) {
    pollfd polled[2] = {{wake_.get(), POLLIN, 0}, {listener_.get(), POLLIN, 0}};
    if (::poll(polled, 2, -1) < 0) {
      if (errno == EINTR) continue;
      log->error("poll on the inherited gRPC socket: {}; no new connections are accepted",
                 std::strerror(errno));
      return;
    }
    if (polled[0].revents != 0) return;  // Stop()
    while (true) {
      const int fd =
          ::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) {
        if (errno == EMFILE || errno == ENFILE) {
          // Out of descriptors: let in-flight work close some instead of spinning on poll.
          log->warn("accept on the inherited gRPC socket: {}", std::strerror(errno));
          pollfd wake = {wake_.get(), POLLIN, 0};
          if (::poll(&wake, 1, 100) > 0) return;
        } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR &&
                   errno != ECONNABORTED) {
          log->warn("accept on the inherited gRPC socket: {}", std::strerror(errno));
        }
        break;
      }
      grpc::AddInsecureChannelFromFd(&server_, fd);  // the server owns fd from here
    }
  }
}

}  // namespace ddo
