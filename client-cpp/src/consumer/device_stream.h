// File: client-cpp/src/consumer/device_stream.h
//
// What the consumer needs from torch's CUDA side, without the c10_cuda headers or cudart
// (docs/plans/issue-18-client-cpp.md §4): the current stream of a device as the driver's
// CUstream, and torch's primary context made current for the driver calls. On a libtorch
// without CUDA (Debian's 1.13) both are FAILED_PRECONDITION "this libtorch has no CUDA".
//
// Thread-safety: the functions may be called from any thread; a CudaDeviceScope belongs to the
// thread that made it (the current device and context are per thread).
#ifndef DDO_CLIENT_CONSUMER_DEVICE_STREAM_H_
#define DDO_CLIENT_CONSUMER_DEVICE_STREAM_H_

#include <c10/core/Device.h>
#include <c10/core/DeviceGuard.h>

#include <optional>

#include "client-cpp/src/consumer/cuda_driver.h"

namespace ddo::consumer {

// True when this libtorch can run CUDA work (built with CUDA, and torch >= 2 for the stream).
bool TorchHasCuda();

// The current stream of CUDA `device` (the legacy default stream is null).
CuStream CurrentCudaStream(const c10::Device& device);

// While alive, `device` is torch's current device and its primary context, created if need
// be, is current on this thread: what cuIpcOpenMemHandle and cuIpcOpenEventHandle use.
class CudaDeviceScope {
 public:
  explicit CudaDeviceScope(const c10::Device& device);
  CudaDeviceScope(const CudaDeviceScope&) = delete;
  CudaDeviceScope& operator=(const CudaDeviceScope&) = delete;

 private:
  std::optional<c10::DeviceGuard> guard_;
};

}  // namespace ddo::consumer

#endif  // DDO_CLIENT_CONSUMER_DEVICE_STREAM_H_
