// File: client-cpp/src/consumer/device_stream.cc
#include "client-cpp/src/consumer/device_stream.h"

#include <ATen/ATen.h>
#include <c10/core/Stream.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/version.h>

#include "ddo/status.h"

namespace ddo::consumer {
namespace {

void RequireCuda(const c10::Device& device) {
  if (!device.is_cuda()) {
    throw Error(StatusCode::kInvalidArgument,
                "a CUDA device was expected, not " + device.str());
  }
  if (!TorchHasCuda()) throw Error(StatusCode::kFailedPrecondition, "this libtorch has no CUDA");
}

}  // namespace

bool TorchHasCuda() {
#if TORCH_VERSION_MAJOR >= 2
  // A CPU-only build registers no CUDA guard implementation.
  return c10::impl::hasDeviceGuardImpl(c10::kCUDA);
#else
  // 1.13's c10::Stream has no native_handle: the stream cannot be had without the CUDA
  // headers. Debian's 1.13 has no CUDA anyway.
  return false;
#endif
}

CuStream CurrentCudaStream(const c10::Device& device) {
  RequireCuda(device);
#if TORCH_VERSION_MAJOR >= 2
  const c10::Stream stream = c10::impl::getDeviceGuardImpl(c10::kCUDA)->getStream(device);
  return static_cast<CuStream>(stream.native_handle());
#else
  return nullptr;  // not reached: RequireCuda threw
#endif
}

CudaDeviceScope::CudaDeviceScope(const c10::Device& device) {
  RequireCuda(device);
  guard_.emplace(device);
  // An allocation creates torch's primary context and makes it current; set_device alone
  // may not (py/cuda_ipc.py does the same).
  (void)at::empty({1}, at::TensorOptions().dtype(at::kByte).device(device));
}

}  // namespace ddo::consumer
