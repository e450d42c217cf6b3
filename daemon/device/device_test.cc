// Tests of the CUDA object wrappers. They need a GPU: on a machine without one (CI) each test
// says so and is skipped; tests/gpu runs them on the GPU machine.
#include <cuda_runtime_api.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "daemon/device/cuda_check.h"
#include "daemon/device/cuda_stream.h"
#include "daemon/device/device_buffer.h"
#include "daemon/device/h2d_bandwidth.h"
#include "daemon/device/ipc_event.h"
#include "daemon/device/ipc_memory.h"
#include "daemon/platform/gpu_inventory.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ddo {
namespace {

using ::testing::HasSubstr;

class DeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (ProbeGpus().backend != ComputeBackend::kCuda) {
      GTEST_SKIP() << "no usable CUDA device on this machine (tests/gpu runs these)";
    }
  }
};

TEST(CudaCheckTest, MapsErrorsToCodesAndNamesThem) {
  EXPECT_TRUE(CudaStatus(cudaSuccess, "x").ok());
  const absl::Status oom = CudaStatus(cudaErrorMemoryAllocation, "cudaMalloc of 9 bytes");
  EXPECT_TRUE(absl::IsResourceExhausted(oom));
  EXPECT_THAT(std::string(oom.message()), HasSubstr("cudaMalloc of 9 bytes: cudaErrorMemoryAllocation"));
  EXPECT_TRUE(absl::IsUnavailable(CudaStatus(cudaErrorNoDevice, "x")));
  EXPECT_TRUE(absl::IsInvalidArgument(CudaStatus(cudaErrorInvalidValue, "x")));
  EXPECT_TRUE(absl::IsInternal(CudaStatus(cudaErrorLaunchFailure, "x")));
}

TEST_F(DeviceTest, CopiesReachTheDeviceInOrderOfEvents) {
  constexpr uint64_t kBytes = 8 << 20;
  std::vector<char> host(kBytes);
  for (uint64_t i = 0; i < kBytes; ++i) host[i] = static_cast<char>(i * 31 + 7);
  auto buffer = DeviceBuffer::Allocate(0, kBytes);
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  auto copier = CudaStream::Create(0);
  auto reader = CudaStream::Create(0);
  auto ready = IpcEvent::Create(0);
  ASSERT_TRUE(copier.ok() && reader.ok() && ready.ok());
  ASSERT_TRUE(copier->CopyToDevice(buffer->data(), host.data(), kBytes).ok());
  ASSERT_TRUE(ready->Record(*copier).ok());
  // The reading stream waits on the event, the way a runner waits for a ring slot.
  ASSERT_TRUE(ready->BlockStream(*reader).ok());
  std::vector<char> back(kBytes);
  ASSERT_EQ(cudaMemcpyAsync(back.data(), buffer->data(), kBytes, cudaMemcpyDeviceToHost,
                            reader->get()),
            cudaSuccess);
  ASSERT_TRUE(reader->Synchronize().ok());
  EXPECT_EQ(std::memcmp(back.data(), host.data(), kBytes), 0);
  auto done = ready->Done();
  ASSERT_TRUE(done.ok());
  EXPECT_TRUE(*done);
}

TEST_F(DeviceTest, ExportsIpcHandles) {
  auto buffer = DeviceBuffer::Allocate(0, 1 << 20);
  ASSERT_TRUE(buffer.ok());
  auto memory_handle = buffer->ExportIpcHandle();
  ASSERT_TRUE(memory_handle.ok()) << memory_handle.status();
  EXPECT_EQ(memory_handle->size(), sizeof(cudaIpcMemHandle_t));
  auto event = IpcEvent::Create(0);
  ASSERT_TRUE(event.ok());
  auto event_handle = event->ExportIpcHandle();
  ASSERT_TRUE(event_handle.ok()) << event_handle.status();
  EXPECT_EQ(event_handle->size(), sizeof(cudaIpcEventHandle_t));
  EXPECT_TRUE(absl::IsInvalidArgument(IpcEvent::Open(0, "short").status()));
}

TEST_F(DeviceTest, AnImpossibleAllocationIsResourceExhausted) {
  auto huge = DeviceBuffer::Allocate(0, 1ull << 50);
  ASSERT_FALSE(huge.ok());
  EXPECT_TRUE(absl::IsResourceExhausted(huge.status())) << huge.status();
  // And the next call on this thread is not poisoned.
  EXPECT_TRUE(DeviceBuffer::Allocate(0, 1 << 20).ok());
}

TEST_F(DeviceTest, MeasuresPinnedBandwidth) {
  auto gbps = MeasurePinnedH2DGbps(0, 64 << 20, 3);
  ASSERT_TRUE(gbps.ok()) << gbps.status();
  EXPECT_GT(*gbps, 1.0);
  EXPECT_LT(*gbps, 1000.0);
}

}  // namespace
}  // namespace ddo

namespace ddo {
namespace {

std::string Hex(const std::string& bytes) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out += kDigits[c >> 4];
    out += kDigits[c & 15];
  }
  return out;
}

std::string Unhex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
  }
  return out;
}

// The importing side, run in a child process by the test below (this same binary, re-executed
// with the handles in its environment). Run on its own it has nothing to import.
TEST(DeviceIpcChild, OpensWhatTheParentExported) {
  const char* memory = std::getenv("DDO_TEST_IPC_MEMORY");
  const char* event = std::getenv("DDO_TEST_IPC_EVENT");
  if (memory == nullptr || event == nullptr) {
    GTEST_SKIP() << "the importing half of DeviceTest.IpcHandlesWorkAcrossProcesses";
  }
  auto stream = CudaStream::Create(0);
  ASSERT_TRUE(stream.ok()) << stream.status();
  auto ready = IpcEvent::Open(0, Unhex(event));
  ASSERT_TRUE(ready.ok()) << ready.status();
  auto mapped = IpcMemory::Open(0, Unhex(memory));
  ASSERT_TRUE(mapped.ok()) << mapped.status();
  ASSERT_TRUE(ready->BlockStream(*stream).ok());
  std::vector<unsigned char> back(1 << 20);
  ASSERT_EQ(cudaMemcpyAsync(back.data(), mapped->data(), back.size(), cudaMemcpyDeviceToHost,
                            stream->get()),
            cudaSuccess);
  ASSERT_TRUE(stream->Synchronize().ok());
  for (size_t i = 0; i < back.size(); ++i) {
    ASSERT_EQ(back[i], static_cast<unsigned char>(i * 13 + 5)) << "at byte " << i;
  }
}

TEST_F(DeviceTest, IpcHandlesWorkAcrossProcesses) {
  constexpr uint64_t kBytes = 1 << 20;
  std::vector<unsigned char> host(kBytes);
  for (uint64_t i = 0; i < kBytes; ++i) host[i] = static_cast<unsigned char>(i * 13 + 5);
  auto buffer = DeviceBuffer::Allocate(0, kBytes);
  auto stream = CudaStream::Create(0);
  auto ready = IpcEvent::Create(0);
  ASSERT_TRUE(buffer.ok() && stream.ok() && ready.ok());
  ASSERT_TRUE(stream->CopyToDevice(buffer->data(), host.data(), kBytes).ok());
  ASSERT_TRUE(ready->Record(*stream).ok());
  auto memory = buffer->ExportIpcHandle();
  auto event = ready->ExportIpcHandle();
  ASSERT_TRUE(memory.ok() && event.ok());
  const std::string command =
      "DDO_TEST_IPC_MEMORY=" + Hex(*memory) + " DDO_TEST_IPC_EVENT=" + Hex(*event) +
      " /proc/" + std::to_string(::getpid()) +
      "/exe --gtest_filter=DeviceIpcChild.OpensWhatTheParentExported > /dev/null";
  // The importer must be another process: CUDA refuses to open a handle in its exporter.
  EXPECT_EQ(std::system(command.c_str()), 0) << command;
}

}  // namespace
}  // namespace ddo
