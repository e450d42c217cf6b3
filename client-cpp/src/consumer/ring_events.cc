// File: client-cpp/src/consumer/ring_events.cc
#include "client-cpp/src/consumer/ring_events.h"

#include <utility>

#include "ddo/status.h"

namespace ddo::consumer {

RingEvents::RingEvents(const std::vector<IpcHandleBytes>& ready,
                       const std::vector<IpcHandleBytes>& consumed, uint32_t slots,
                       std::function<CuStream()> current_stream)
    : current_stream_(std::move(current_stream)) {
  const size_t count = size_t{slots} + 1;
  if (ready.size() != count || consumed.size() != count) {
    throw Error(StatusCode::kFailedPrecondition,
                "ddod sent " + std::to_string(ready.size()) + " ready and " +
                    std::to_string(consumed.size()) + " consumed event handles for " +
                    std::to_string(count) + " slots");
  }
  driver_ = CudaDriver::Get();
  for (const IpcHandleBytes& handle : ready) ready_.push_back(std::make_unique<IpcEvent>(handle));
  for (const IpcHandleBytes& handle : consumed) {
    consumed_.push_back(std::make_unique<IpcEvent>(handle));
  }
}

void RingEvents::RecordConsumed(uint32_t slot) { consumed_.at(slot)->Record(current_stream_()); }

void RingEvents::RefuseCapture(const std::string& where) {
  if (!driver_->StreamIsCapturing(current_stream_())) return;
  throw GraphCaptureError(
      StatusCode::kFailedPrecondition,
      where + ": a CUDA graph capture reached a module on the DDO route. Its weights stream "
              "from ddod's ring, refilled while the forward runs, which a replayed graph cannot "
              "follow (it would replay the weights of the captured pass). Run the module "
              "eagerly, or compile it without CUDA graphs (torch.compile with mode='default' or "
              "'max-autotune-no-cudagraphs': the streamed Linears become graph breaks), or give "
              "the component the 'none' route when all its weights fit on the GPU.");
}

}  // namespace ddo::consumer
