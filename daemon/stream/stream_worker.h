// File: daemon/stream/stream_worker.h
//
// The copy worker of one device: a thread that serves every streaming session on the device,
// one unit per session per turn (fair sharing; a session whose ring is full is passed over, so
// a runner that stops consuming holds up nobody else). With nothing to do it sleeps on the
// device's doorbell, which runners ring when they free a slot or ask for a unit.
//
// Thread-safety: Add() and Remove() may be called from any thread. After Remove() returns the
// worker no longer touches the session.
#ifndef DDO_DAEMON_STREAM_STREAM_WORKER_H_
#define DDO_DAEMON_STREAM_STREAM_WORKER_H_

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "daemon/stream/control_block.h"
#include "daemon/stream/stream_session.h"

namespace ddo {

class StreamWorker {
 public:
  // `doorbell_name`: the shared-memory name of the device's doorbell.
  static absl::StatusOr<std::unique_ptr<StreamWorker>> Start(std::string device,
                                                             const std::string& doorbell_name);
  StreamWorker(const StreamWorker&) = delete;
  StreamWorker& operator=(const StreamWorker&) = delete;
  // Stops the thread; sessions still added are left to their owner.
  ~StreamWorker();

  void Add(std::shared_ptr<StreamSession> session);
  void Remove(const std::string& session_id);
  // Wakes the worker (a schedule arrived).
  void Ring() { doorbell_.Ring(); }

  const std::string& doorbell_name() const { return doorbell_.name(); }
  size_t session_count();

 private:
  StreamWorker(std::string device, Doorbell doorbell);
  void Run();

  const std::string device_;
  Doorbell doorbell_;
  std::atomic<bool> stopping_{false};

  // Held by the worker for each pass over the sessions; Remove() takes it to know the worker
  // let go.
  absl::Mutex pass_mu_;
  // The worker's copy of sessions_, refreshed at each pass; Remove() drops from it too, so a
  // removed session is freed by its owner at once, not at the worker's next pass.
  std::vector<std::shared_ptr<StreamSession>> snapshot_ ABSL_GUARDED_BY(pass_mu_);
  absl::Mutex mu_;
  std::vector<std::shared_ptr<StreamSession>> sessions_ ABSL_GUARDED_BY(mu_);
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;
};

}  // namespace ddo

#endif  // DDO_DAEMON_STREAM_STREAM_WORKER_H_
