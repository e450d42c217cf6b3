// File: daemon/device/ipc_memory.h
//
// Device memory another process exported (CUDA builds only): a mapping opened from a
// cudaIpcMemHandle_t, closed when the object goes. This is the importer's side of a
// DeviceBuffer::ExportIpcHandle (the C++ client and the tests use it; the Python client opens
// the same handle with cuIpcOpenMemHandle through ctypes). Move-only.
//
// Thread-safety: the mapping may be read and written from any thread while the object lives;
// the object itself is used (moved, destroyed) by one thread at a time.
#ifndef DDO_DAEMON_DEVICE_IPC_MEMORY_H_
#define DDO_DAEMON_DEVICE_IPC_MEMORY_H_

#include <string>

#include "absl/status/statusor.h"

namespace ddo {

class IpcMemory {
 public:
  // Opens `handle` (64 bytes) on device `ordinal`. INVALID_ARGUMENT for a malformed handle;
  // CUDA's error otherwise (the exporter must be a different, still-running process).
  static absl::StatusOr<IpcMemory> Open(int ordinal, const std::string& handle);

  IpcMemory(IpcMemory&& other) noexcept;
  IpcMemory& operator=(IpcMemory&&) = delete;
  IpcMemory(const IpcMemory&) = delete;
  IpcMemory& operator=(const IpcMemory&) = delete;
  ~IpcMemory();

  void* data() const { return data_; }

 private:
  IpcMemory(int ordinal, void* data) : ordinal_(ordinal), data_(data) {}

  int ordinal_ = -1;
  void* data_ = nullptr;
};

}  // namespace ddo

#endif  // DDO_DAEMON_DEVICE_IPC_MEMORY_H_
