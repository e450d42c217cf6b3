// File: client-cpp/tests/cuda_driver_test.cc
//
// The CUDA driver looked up at run time: on a machine without libcuda.so.1 every use is a
// clear FAILED_PRECONDITION naming the library (nothing was linked against it); with a driver
// and a GPU, the device's UUID comes in the GPU-8-4-4-4-12 form torch and nvidia-smi print.
#include "client-cpp/src/consumer/cuda_driver.h"

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <regex>
#include <string>

#include "client-cpp/src/consumer/ring_events.h"
#include "ddo/status.h"

namespace ddo::consumer {
namespace {

bool DriverPresent() {
  void* library = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) return false;
  ::dlclose(library);
  return true;
}

TEST(CudaDriver, WithoutADriverEveryUseSaysWhichLibraryIsMissing) {
  if (DriverPresent()) GTEST_SKIP() << "this machine has a CUDA driver";
  const std::string prefix = "cannot load the CUDA driver (libcuda.so.1): ";
  try {
    CudaDriver::Get();
    FAIL() << "no exception";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), StatusCode::kFailedPrecondition);
    EXPECT_EQ(std::string(error.what()).substr(0, prefix.size()), prefix) << error.what();
  }
  IpcHandleBytes handle{};
  EXPECT_THROW(IpcEvent event(handle), Error);
  EXPECT_THROW(IpcMemory memory(handle), Error);
  // The handle count is checked before the driver is needed.
  try {
    RingEvents events({handle}, {handle, handle}, 1, [] { return CuStream{}; });
    FAIL() << "no exception";
  } catch (const Error& error) {
    EXPECT_STREQ(error.what(), "ddod sent 1 ready and 2 consumed event handles for 2 slots");
  }
}

TEST(CudaDriver, TheDeviceUuidHasTheGpuForm) {
  if (!DriverPresent()) GTEST_SKIP() << "no CUDA driver on this machine";
  std::string uuid;
  try {
    uuid = CudaDriver::Get()->DeviceUuid(0);
  } catch (const Error& error) {
    GTEST_SKIP() << "no usable GPU: " << error.what();
  }
  EXPECT_TRUE(std::regex_match(
      uuid, std::regex("GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")))
      << uuid;
}

}  // namespace
}  // namespace ddo::consumer
