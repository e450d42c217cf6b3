// File: daemon/device/cuda_stream.h
//
// A non-blocking CUDA stream on one device (CUDA builds only), for ddod's copies: it never
// synchronises with the legacy default stream, so copies overlap whatever else runs.
// Move-only; destroyed on its device.
//
// Thread-safety: one thread at a time uses a CudaStream (a session's copy worker); CUDA itself
// allows enqueueing on a stream from several threads, DDO does not rely on it.
#ifndef DDO_DAEMON_DEVICE_CUDA_STREAM_H_
#define DDO_DAEMON_DEVICE_CUDA_STREAM_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/statusor.h"

namespace ddo {

class CudaStream {
 public:
  static absl::StatusOr<CudaStream> Create(int ordinal);

  CudaStream(CudaStream&& other) noexcept;
  CudaStream& operator=(CudaStream&&) = delete;
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;
  ~CudaStream();

  // Enqueues a host-to-device copy; `source` should be pinned for the copy to be asynchronous.
  absl::Status CopyToDevice(void* destination, const void* source, uint64_t bytes);
  absl::Status Synchronize();

  cudaStream_t get() const { return stream_; }
  int ordinal() const { return ordinal_; }

 private:
  CudaStream(int ordinal, cudaStream_t stream) : ordinal_(ordinal), stream_(stream) {}

  int ordinal_ = -1;
  cudaStream_t stream_ = nullptr;
};

}  // namespace ddo

#endif  // DDO_DAEMON_DEVICE_CUDA_STREAM_H_
