// File: client-cpp/src/rpc/lease.h
//
// The client's lease: one Connect stream held open for the client's whole life
// (docs/protocol.md, "Leases"; the Python copy is lease.py). ddod answers with a `connected`
// event carrying the lease id and keeps the stream open; when the stream ends, ddod releases
// everything the lease owns. A thread reads the events (`shutting_down`; kinds it does not
// know are ignored).
//
// Thread-safety: the accessors may be called from any thread; the destructor cancels the
// stream and joins the thread.
#ifndef DDO_CLIENT_RPC_LEASE_H_
#define DDO_CLIENT_RPC_LEASE_H_

#include <grpcpp/client_context.h>
#include <grpcpp/support/sync_stream.h>

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "ddo/v1/ddo.grpc.pb.h"

namespace ddo {

class Lease {
 public:
  // Opens the stream with `token` and waits up to `timeout_seconds` for the lease id. ddod's
  // refusal as its status; DEADLINE_EXCEEDED when no confirmation came in time.
  static absl::StatusOr<std::unique_ptr<Lease>> Open(ddo::v1::Ddo::Stub& stub,
                                                      const std::string& token,
                                                      const std::string& client_name,
                                                      double timeout_seconds);
  Lease(const Lease&) = delete;
  Lease& operator=(const Lease&) = delete;
  ~Lease();

  const std::string& lease_id() const { return lease_id_; }  // set before Open returns
  bool shutting_down() const;
  std::string lost_reason() const;

 private:
  Lease() = default;
  void Consume();

  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReader<ddo::v1::ConnectEvent>> reader_;
  std::thread thread_;
  std::string lease_id_;

  mutable std::mutex mutex_;
  std::condition_variable changed_;
  bool confirmed_ = false;       // guarded by mutex_: the id came
  bool ended_ = false;           // guarded by mutex_: the stream ended
  bool closing_ = false;         // guarded by mutex_: the destructor ends it
  bool shutting_down_ = false;   // guarded by mutex_
  std::string pending_id_;       // guarded by mutex_
  std::string lost_reason_;      // guarded by mutex_
  absl::Status failure_;         // guarded by mutex_: how the stream failed
};

}  // namespace ddo

#endif  // DDO_CLIENT_RPC_LEASE_H_
