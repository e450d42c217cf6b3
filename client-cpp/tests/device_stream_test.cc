// File: client-cpp/tests/device_stream_test.cc
//
// What the consumer asks of torch's CUDA side. On a libtorch without CUDA (Debian's 1.13) the
// answer is FAILED_PRECONDITION "this libtorch has no CUDA"; a CPU device is a caller's error.
#include "client-cpp/src/consumer/device_stream.h"

#include <gtest/gtest.h>

#include "ddo/status.h"

namespace ddo::consumer {
namespace {

TEST(DeviceStream, ACpuDeviceHasNoCudaStream) {
  try {
    CurrentCudaStream(c10::Device(c10::kCPU));
    FAIL() << "no exception";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), StatusCode::kInvalidArgument);
    EXPECT_STREQ(error.what(), "a CUDA device was expected, not cpu");
  }
}

TEST(DeviceStream, ALibtorchWithoutCudaSaysSo) {
  if (TorchHasCuda()) GTEST_SKIP() << "this libtorch has CUDA";
  const c10::Device cuda(c10::kCUDA, 0);
  for (int attempt = 0; attempt < 2; ++attempt) {
    try {
      if (attempt == 0) {
        CurrentCudaStream(cuda);
      } else {
        CudaDeviceScope scope(cuda);
      }
      FAIL() << "no exception";
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), StatusCode::kFailedPrecondition);
      EXPECT_STREQ(error.what(), "this libtorch has no CUDA");
    }
  }
}

}  // namespace
}  // namespace ddo::consumer
