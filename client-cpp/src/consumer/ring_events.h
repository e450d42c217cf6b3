// File: client-cpp/src/consumer/ring_events.h
//
// The CUDA interprocess events of a session's ring (docs/streaming.md §4): ddod exports a
// "ready" and a "consumed" event per slot (K + 1). Only "consumed" is recorded, on the
// runner's current stream, when a slot is released; ddod polls it before it overwrites the
// slot. "ready" is opened (the session holds what ddod exported) but never waited on: ddod
// publishes `ready` only once its copy has completed. Torch-free: the current stream comes
// from a function (device_stream.h gives torch's).
//
// Thread-safety: none; a session's one runner thread records and refuses (one forward at a time).
#ifndef DDO_CLIENT_CONSUMER_RING_EVENTS_H_
#define DDO_CLIENT_CONSUMER_RING_EVENTS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "client-cpp/src/consumer/cuda_driver.h"

namespace ddo::consumer {

class RingEvents {
 public:
  // Opens the handles in the current context; ddo::Error (FAILED_PRECONDITION) unless there are
  // `slots` + 1 of each, as py/streaming.py checks.
  RingEvents(const std::vector<IpcHandleBytes>& ready, const std::vector<IpcHandleBytes>& consumed,
             uint32_t slots, std::function<CuStream()> current_stream);

  // Marks the end of the current stream's reads of `slot`.
  void RecordConsumed(uint32_t slot);
  // GraphCaptureError when the current stream captures a CUDA graph: a replayed graph would
  // replay the weights of the captured pass. `where` names the caller ("a streamed Linear").
  void RefuseCapture(const std::string& where);

 private:
  std::shared_ptr<const CudaDriver> driver_;
  std::vector<std::unique_ptr<IpcEvent>> ready_;
  std::vector<std::unique_ptr<IpcEvent>> consumed_;
  std::function<CuStream()> current_stream_;
};

}  // namespace ddo::consumer

#endif  // DDO_CLIENT_CONSUMER_RING_EVENTS_H_
