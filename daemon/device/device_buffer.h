// File: daemon/device/device_buffer.h
//
// Device memory owned by ddod (CUDA builds only): cudaMalloc on a given device, freed on that
// device, exportable to other processes as a legacy CUDA IPC handle (64 opaque bytes that a
// client opens with cuIpcOpenMemHandle). Move-only; destruction never throws.
//
// Thread-safety: an object is used by one thread at a time; different buffers are independent.
#ifndef DDO_DAEMON_DEVICE_DEVICE_BUFFER_H_
#define DDO_DAEMON_DEVICE_DEVICE_BUFFER_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace ddo {

class DeviceBuffer {
 public:
  // RESOURCE_EXHAUSTED when the device has no room.
  static absl::StatusOr<DeviceBuffer> Allocate(int ordinal, uint64_t bytes);

  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer();

  // The cudaIpcMemHandle_t bytes for other processes.
  absl::StatusOr<std::string> ExportIpcHandle() const;

  void* data() const { return data_; }
  uint64_t size() const { return size_; }
  int ordinal() const { return ordinal_; }

 private:
  DeviceBuffer(int ordinal, void* data, uint64_t size)
      : ordinal_(ordinal), data_(data), size_(size) {}
  void Release();

  int ordinal_ = -1;
  void* data_ = nullptr;
  uint64_t size_ = 0;
};

}  // namespace ddo

#endif  // DDO_DAEMON_DEVICE_DEVICE_BUFFER_H_
