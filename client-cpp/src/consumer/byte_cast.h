// File: client-cpp/src/consumer/byte_cast.h
//
// weight.to(dtype) for a weight stored in a 1-byte float format (fp8: e4m3fn, e5m2, the fnuz
// ones...) through DDO's own kernels (kernels/byte_cast.cu): torch's fp8 -> bf16 cast runs its
// generic unvectorized copy kernel, about twice as slow (docs/streaming.md, "Stored dtypes
// (fp8) and own forwards"). The kernels look each byte up in a 256-entry table that torch
// builds on the device from the two dtypes (arange(256, uint8).view(src).to(dst)), so the
// result is bitwise torch's own conversion.
//
// The kernels come as PTX text, installed once per process (the Python client reads its
// package's kernels/byte_cast.ptx and passes it at init; the C++ client installs none yet, so
// its casts stay torch's). Each CUDA context loads the PTX on its first cast
// (cuModuleLoadData); the modules and the tables live as long as the process (unloading them
// at exit would race the driver's own teardown). Launches go on torch's current stream of the
// tensor's device with cuLaunchKernel. Never under CUDA graph capture, in grad mode for a
// tensor that requires grad, or with Debian's torch 1.13 (no CUDA): those casts stay torch's,
// as do those of non-contiguous tensors.
//
// A failure to load or launch the kernels is reported once (the reporter given at install) and
// turns them off for the process; that cast and all later ones are torch's.
//
// Thread-safety: every function is safe from any thread.
#ifndef DDO_CLIENT_CONSUMER_BYTE_CAST_H_
#define DDO_CLIENT_CONSUMER_BYTE_CAST_H_

#include <ATen/ATen.h>

#include <functional>
#include <string>

namespace ddo::consumer {

// Called once with why the kernels were turned off.
using ByteCastReporter = std::function<void(const std::string& reason)>;

// Installs the kernels' PTX text for the process (an empty text turns them off) and who is
// told when they fail. Replaces an earlier installation; contexts that loaded the earlier text
// keep it.
void InstallByteCast(std::string ptx, ByteCastReporter reporter);

// Whether CastWeight would run the kernels for `tensor` -> `dtype`: installed and not turned
// off, a contiguous CUDA tensor of a 1-byte floating dtype, `dtype` one of bf16, fp16, fp32,
// and no autograd to keep (grad mode with a tensor that requires grad).
bool ByteCastHandles(const at::Tensor& tensor, at::ScalarType dtype);

// tensor.to(dtype): through the kernels when ByteCastHandles (and the stream is not capturing
// a graph), else torch's.
at::Tensor CastWeight(const at::Tensor& tensor, at::ScalarType dtype);

}  // namespace ddo::consumer

#endif  // DDO_CLIENT_CONSUMER_BYTE_CAST_H_
