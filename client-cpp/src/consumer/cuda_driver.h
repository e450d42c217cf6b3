// File: client-cpp/src/consumer/cuda_driver.h
//
// The CUDA driver API, looked up at run time with dlopen("libcuda.so.1"), as
// py/cuda_ipc.py does: no CUDA headers and no cudart, so one client library runs on a CPU-only
// libtorch and on a CUDA one, and a machine without a driver gets a clear error only when it
// asks for CUDA. The handful of driver types are declared here as the driver ABI has them.
//
// IpcMemory and IpcEvent own what they open (closed on destruction) and keep the driver
// loaded while they live.
//
// Thread-safety: CudaDriver::Get is safe from any thread; the objects are not shared.
#ifndef DDO_CLIENT_CONSUMER_CUDA_DRIVER_H_
#define DDO_CLIENT_CONSUMER_CUDA_DRIVER_H_

#include <array>
#include <cstdint>
#include <memory>
#include <string>

namespace ddo::consumer {

// The driver's types, by their ABI (cuda.h).
using CuResult = int;
using CuDevice = int;
using CuDevicePtr = unsigned long long;
using CuContext = struct CuContextOpaque*;
using CuEvent = struct CuEventOpaque*;
using CuStream = struct CuStreamOpaque*;
using CuModule = struct CuModuleOpaque*;
using CuFunction = struct CuFunctionOpaque*;
// CUipcMemHandle / CUipcEventHandle: 64 opaque bytes, passed by value.
inline constexpr size_t kIpcHandleBytes = 64;
using IpcHandleBytes = std::array<uint8_t, kIpcHandleBytes>;

class CudaDriver {
 public:
  // The process's driver, loaded (and cuInit'ed) once. ddo::Error (FAILED_PRECONDITION)
  // "cannot load the CUDA driver (libcuda.so.1): ..." when this machine has none.
  static std::shared_ptr<const CudaDriver> Get();

  ~CudaDriver();
  CudaDriver(const CudaDriver&) = delete;
  CudaDriver& operator=(const CudaDriver&) = delete;

  // ddo::Error (INTERNAL) "<what> failed: CUDA_ERROR_..." unless `result` is CUDA_SUCCESS.
  void Check(CuResult result, const std::string& what) const;

  // "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" of the device with driver ordinal `ordinal`
  // (torch's CUDA index in the same process).
  std::string DeviceUuid(int ordinal) const;
  // The calling thread's current context (null when none).
  CuContext CurrentContext() const;
  // True while `stream` captures a CUDA graph (active or invalidated).
  bool StreamIsCapturing(CuStream stream) const;
  // Records `event` on `stream`.
  void RecordEvent(CuEvent event, CuStream stream) const;

  // For kernels shipped as PTX (byte_cast.h), in the current context: the module loaded from
  // the NUL-terminated `ptx`, one of its kernels, and a launch of it on `stream`
  // (`arguments`: a pointer to each kernel parameter, in order).
  CuModule LoadModule(const char* ptx) const;
  CuFunction ModuleFunction(CuModule module, const char* name) const;
  void Launch(CuFunction function, unsigned blocks, unsigned threads, CuStream stream,
              void** arguments) const;
  // The number of multiprocessors of the current context's device.
  int MultiprocessorCount() const;

  struct Functions;
  const Functions& functions() const { return *functions_; }

 private:
  CudaDriver(void* library, std::unique_ptr<Functions> functions);

  void* library_;  // dlclose'd on destruction
  std::unique_ptr<Functions> functions_;
};

// Device memory another process exported (cuIpcOpenMemHandle_v2 with lazy peer access),
// mapped into this one in the context current at construction; closed (cuIpcCloseMemHandle,
// in that context) on destruction. Tensors over it must not be used afterwards.
class IpcMemory {
 public:
  explicit IpcMemory(const IpcHandleBytes& handle);
  ~IpcMemory();
  IpcMemory(const IpcMemory&) = delete;
  IpcMemory& operator=(const IpcMemory&) = delete;

  CuDevicePtr pointer() const { return pointer_; }

 private:
  std::shared_ptr<const CudaDriver> driver_;
  CuContext context_ = nullptr;
  CuDevicePtr pointer_ = 0;
};

// An interprocess event another process exported (cuIpcOpenEventHandle); destroyed on
// destruction.
class IpcEvent {
 public:
  explicit IpcEvent(const IpcHandleBytes& handle);
  ~IpcEvent();
  IpcEvent(const IpcEvent&) = delete;
  IpcEvent& operator=(const IpcEvent&) = delete;

  CuEvent get() const { return event_; }
  // Records the event on `stream`.
  void Record(CuStream stream) const { driver_->RecordEvent(event_, stream); }

 private:
  std::shared_ptr<const CudaDriver> driver_;
  CuEvent event_ = nullptr;
};

}  // namespace ddo::consumer

#endif  // DDO_CLIENT_CONSUMER_CUDA_DRIVER_H_
