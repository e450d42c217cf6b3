// File: client-cpp/src/torch/device_memory.cc
#include "client-cpp/src/torch/device_memory.h"

#include <utility>

#include "client-cpp/src/consumer/ring_views.h"

namespace ddo::detail {

std::unique_ptr<DeviceMemory> DeviceMemory::Open(RpcClient& rpc, const std::string& what,
                                                 uint64_t size, const std::string& shm_name,
                                                 const IpcHandle* handle,
                                                 const torch::Device& device, MapMode mode) {
  std::unique_ptr<DeviceMemory> memory(new DeviceMemory(what, size));
  if (size == 0) return memory;
  if (device.is_cpu()) {
    if (shm_name.empty()) {
      throw Error(StatusCode::kFailedPrecondition,
                  "ddod sent no shared-memory name for the session's " + what);
    }
    UniqueFd fd = ValueOrThrow(rpc.open_segment(shm_name, /*writable=*/false));
    memory->host_ = ValueOrThrow(SharedMapping::Map(fd.get(), size, mode, shm_name));
    std::shared_ptr<SharedMapping> keep = memory->host_;
    memory->whole_ = consumer::RingTensor(keep->data(), size, device,
                                          [keep](void*) mutable { keep.reset(); });
    return memory;
  }
  if (handle == nullptr) {
    throw Error(StatusCode::kFailedPrecondition,
                "ddod sent no CUDA IPC handle for the session's " + what);
  }
  memory->ipc_ = std::make_unique<consumer::IpcMemory>(*handle);
  // Closed explicitly (the session's close order), not by the tensor's deleter: ddod frees
  // the memory right after Detach.
  memory->whole_ = consumer::RingTensor(reinterpret_cast<void*>(memory->ipc_->pointer()), size,
                                        device, [](void*) {});
  return memory;
}

DeviceMemory::~DeviceMemory() {
  whole_ = torch::Tensor();
  ipc_.reset();
}

const torch::Tensor& DeviceMemory::Whole() const {
  if (!whole_.defined()) {
    throw Error(StatusCode::kFailedPrecondition, "the session's " + what_ + " is empty");
  }
  return whole_;
}

torch::Tensor DeviceMemory::View(uint64_t offset, uint64_t byte_size, c10::ScalarType type,
                                 const std::vector<int64_t>& shape,
                                 const std::string& name) const {
  if (offset + byte_size > size_ || offset + byte_size < offset) {
    throw Error(StatusCode::kInternal, "ddod placed '" + name + "' at bytes [" +
                                           std::to_string(offset) + ", " +
                                           std::to_string(offset + byte_size) + ") of the " +
                                           what_ + ", which has " + std::to_string(size_) +
                                           " bytes");
  }
  int64_t elements = 1;
  for (int64_t dim : shape) elements *= dim;
  const uint64_t expected = static_cast<uint64_t>(elements) * c10::elementSize(type);
  if (expected != byte_size) {
    throw Error(StatusCode::kInternal, std::to_string(byte_size) + " bytes of the " + what_ +
                                           " cannot hold '" + name + "' (" +
                                           std::to_string(expected) + " bytes)");
  }
  if (byte_size == 0) {
    return torch::empty(shape, torch::TensorOptions().dtype(type).device(whole_.device()));
  }
  if (offset % c10::elementSize(type) != 0) {
    throw Error(StatusCode::kInternal, "ddod placed '" + name + "' at byte " +
                                           std::to_string(offset) + " of the " + what_ +
                                           ", not aligned to its elements");
  }
  return Whole()
      .narrow(0, static_cast<int64_t>(offset), static_cast<int64_t>(byte_size))
      .view(type)
      .reshape(shape);
}

}  // namespace ddo::detail
