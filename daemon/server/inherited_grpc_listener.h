// File: daemon/server/inherited_grpc_listener.h
//
// Serves gRPC on a listening socket ddod did not bind (socket activation): gRPC's C++ API
// cannot listen on a descriptor it is given, so one thread accepts each connection and hands
// it to the server (grpc::AddInsecureChannelFromFd), which then serves it like any other.
//
// Thread-safety: Start and Stop from one thread; Stop before the gRPC server shuts down.
#ifndef DDO_DAEMON_SERVER_INHERITED_GRPC_LISTENER_H_
#define DDO_DAEMON_SERVER_INHERITED_GRPC_LISTENER_H_

#include <grpcpp/server.h>

#include <memory>
#include <thread>

#include "absl/status/statusor.h"
#include "daemon/common/unique_fd.h"

namespace ddo {

class InheritedGrpcListener {
 public:
  // Starts accepting on `listener` for `server`, which must outlive Stop().
  static absl::StatusOr<std::unique_ptr<InheritedGrpcListener>> Start(UniqueFd listener,
                                                                      grpc::Server& server);
  InheritedGrpcListener(const InheritedGrpcListener&) = delete;
  InheritedGrpcListener& operator=(const InheritedGrpcListener&) = delete;
  ~InheritedGrpcListener();

  // Stops accepting; connections already handed over stay the server's. The listening socket
  // is closed (systemd keeps its own copy: connections queue there until the next start).
  void Stop();

 private:
  InheritedGrpcListener(UniqueFd listener, grpc::Server& server)
      : listener_(std::move(listener)), server_(server) {}
  void Run();

  UniqueFd listener_;
  UniqueFd wake_;  // eventfd: Stop() wakes the poll
  grpc::Server& server_;
  std::thread thread_;
};

}  // namespace ddo

#endif  // DDO_DAEMON_SERVER_INHERITED_GRPC_LISTENER_H_
