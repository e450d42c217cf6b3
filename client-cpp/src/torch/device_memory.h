// File: client-cpp/src/torch/device_memory.h
//
// A streaming session's resident slab or ring: on the host backend a shared-memory segment ddod
// names (the slab mapped copy-on-write, the ring shared read-only because ddod keeps refilling
// it); on a GPU, CUDA memory ddod exports with an IPC handle. Views of it are zero-copy tensors.
// The CUDA mapping is closed when this object goes (the session's close order); host mappings
// stay alive while a view holds them.
//
// Thread-safety: opened and closed by the session's thread; views taken from it may be read from
// any thread while the memory lives (a CUDA mapping ends with this object).
#ifndef DDO_CLIENT_TORCH_DEVICE_MEMORY_H_
#define DDO_CLIENT_TORCH_DEVICE_MEMORY_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <torch/types.h>

#include "client-cpp/src/consumer/cuda_driver.h"
#include "client-cpp/src/torch/shared_mapping.h"
#include "ddo/rpc.h"

namespace ddo::detail {

class DeviceMemory {
 public:
  // `what` names it in messages ("resident slab", "ring"). Host: opens `shm_name` through
  // `rpc` (by name or on the identity socket) and maps `size` bytes in `mode`. CUDA: opens
  // `handle` in the current context (the caller holds a consumer::CudaDeviceScope). `size` 0:
  // nothing to map.
  static std::unique_ptr<DeviceMemory> Open(RpcClient& rpc, const std::string& what,
                                            uint64_t size, const std::string& shm_name,
                                            const IpcHandle* handle, const torch::Device& device,
                                            MapMode mode);
  ~DeviceMemory();
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;

  uint64_t size() const { return size_; }
  // The whole memory as one uint8 tensor on the device.
  const torch::Tensor& Whole() const;
  // A zero-copy tensor of `type` and `shape` over `byte_size` bytes at `offset`; ddo::Error
  // when that lies outside the memory or does not hold the shape.
  torch::Tensor View(uint64_t offset, uint64_t byte_size, c10::ScalarType type,
                     const std::vector<int64_t>& shape, const std::string& name) const;

 private:
  DeviceMemory(std::string what, uint64_t size) : what_(std::move(what)), size_(size) {}

  std::string what_;
  uint64_t size_;
  std::shared_ptr<SharedMapping> host_;
  std::unique_ptr<consumer::IpcMemory> ipc_;
  torch::Tensor whole_;
};

}  // namespace ddo::detail

#endif  // DDO_CLIENT_TORCH_DEVICE_MEMORY_H_
