// File: client-cpp/src/consumer/cuda_driver.cc
#include "client-cpp/src/consumer/cuda_driver.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <mutex>
#include <utility>

#include "ddo/status.h"

namespace ddo::consumer {

// CUipcMemHandle and CUipcEventHandle: a struct of 64 bytes, passed by value. (An array would
// be passed as a pointer, and the driver would read garbage: CUDA_ERROR_INVALID_VALUE.)
// Not in the anonymous namespace: CudaDriver::Functions names them.
struct CuIpcHandleAbi {
  char reserved[kIpcHandleBytes];
};
struct CuUuidAbi {
  unsigned char bytes[16];
};

struct CudaDriver::Functions {
  CuResult (*cuInit)(unsigned) = nullptr;
  CuResult (*cuGetErrorName)(CuResult, const char**) = nullptr;
  CuResult (*cuDeviceGet)(CuDevice*, int) = nullptr;
  CuResult (*cuDeviceGetUuid)(CuUuidAbi*, CuDevice) = nullptr;  // _v2 when present
  CuResult (*cuCtxGetCurrent)(CuContext*) = nullptr;
  CuResult (*cuCtxPushCurrent)(CuContext) = nullptr;
  CuResult (*cuCtxPopCurrent)(CuContext*) = nullptr;
  CuResult (*cuIpcOpenMemHandle)(CuDevicePtr*, CuIpcHandleAbi, unsigned) = nullptr;
  CuResult (*cuIpcCloseMemHandle)(CuDevicePtr) = nullptr;
  CuResult (*cuIpcOpenEventHandle)(CuEvent*, CuIpcHandleAbi) = nullptr;
  CuResult (*cuEventRecord)(CuEvent, CuStream) = nullptr;
  CuResult (*cuEventDestroy)(CuEvent) = nullptr;
  CuResult (*cuStreamIsCapturing)(CuStream, int*) = nullptr;
  // The byte-cast kernels (byte_cast.cc): PTX loaded and launched through the driver.
  CuResult (*cuCtxGetDevice)(CuDevice*) = nullptr;
  CuResult (*cuDeviceGetAttribute)(int*, int, CuDevice) = nullptr;
  CuResult (*cuModuleLoadData)(CuModule*, const void*) = nullptr;
  CuResult (*cuModuleGetFunction)(CuFunction*, CuModule, const char*) = nullptr;
  CuResult (*cuLaunchKernel)(CuFunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                             unsigned, unsigned, CuStream, void**, void**) = nullptr;
};

namespace {

constexpr const char* kLibrary = "libcuda.so.1";
constexpr unsigned kLazyEnablePeerAccess = 1;  // CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS
constexpr int kCaptureStatusNone = 0;          // CU_STREAM_CAPTURE_STATUS_NONE
constexpr int kMultiprocessorCountAttribute = 16;  // CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT

CuIpcHandleAbi ToHandle(const IpcHandleBytes& bytes) {
  CuIpcHandleAbi handle;
  std::memcpy(handle.reserved, bytes.data(), kIpcHandleBytes);
  return handle;
}

// Looks up `names` in order (a versioned entry point first) into `function`.
template <typename Function>
void Resolve(void* library, Function& function, std::initializer_list<const char*> names) {
  for (const char* name : names) {
    if (void* symbol = ::dlsym(library, name)) {
      function = reinterpret_cast<Function>(symbol);
      return;
    }
  }
  throw Error(StatusCode::kFailedPrecondition,
              std::string("the CUDA driver (") + kLibrary + ") has no " + *names.begin() +
                  " (the driver is too old)");
}

}  // namespace

std::shared_ptr<const CudaDriver> CudaDriver::Get() {
  static std::mutex mutex;
  static std::shared_ptr<const CudaDriver> driver;
  std::lock_guard<std::mutex> lock(mutex);
  if (driver) return driver;
  void* library = ::dlopen(kLibrary, RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    const char* reason = ::dlerror();
    throw Error(StatusCode::kFailedPrecondition,
                std::string("cannot load the CUDA driver (") + kLibrary +
                    "): " + (reason != nullptr ? reason : "dlopen failed"));
  }
  auto functions = std::make_unique<Functions>();
  try {
    Functions& f = *functions;
    Resolve(library, f.cuInit, {"cuInit"});
    Resolve(library, f.cuGetErrorName, {"cuGetErrorName"});
    Resolve(library, f.cuDeviceGet, {"cuDeviceGet"});
    Resolve(library, f.cuDeviceGetUuid, {"cuDeviceGetUuid_v2", "cuDeviceGetUuid"});
    Resolve(library, f.cuCtxGetCurrent, {"cuCtxGetCurrent"});
    Resolve(library, f.cuCtxPushCurrent, {"cuCtxPushCurrent_v2", "cuCtxPushCurrent"});
    Resolve(library, f.cuCtxPopCurrent, {"cuCtxPopCurrent_v2", "cuCtxPopCurrent"});
    Resolve(library, f.cuIpcOpenMemHandle, {"cuIpcOpenMemHandle_v2", "cuIpcOpenMemHandle"});
    Resolve(library, f.cuIpcCloseMemHandle, {"cuIpcCloseMemHandle"});
    Resolve(library, f.cuIpcOpenEventHandle, {"cuIpcOpenEventHandle"});
    Resolve(library, f.cuEventRecord, {"cuEventRecord"});
    Resolve(library, f.cuEventDestroy, {"cuEventDestroy_v2", "cuEventDestroy"});
    Resolve(library, f.cuStreamIsCapturing, {"cuStreamIsCapturing"});
    Resolve(library, f.cuCtxGetDevice, {"cuCtxGetDevice"});
    Resolve(library, f.cuDeviceGetAttribute, {"cuDeviceGetAttribute"});
    Resolve(library, f.cuModuleLoadData, {"cuModuleLoadData"});
    Resolve(library, f.cuModuleGetFunction, {"cuModuleGetFunction"});
    Resolve(library, f.cuLaunchKernel, {"cuLaunchKernel"});
  } catch (...) {
    ::dlclose(library);
    throw;
  }
  std::shared_ptr<const CudaDriver> loaded(new CudaDriver(library, std::move(functions)));
  loaded->Check(loaded->functions().cuInit(0), "cuInit");
  driver = std::move(loaded);
  return driver;
}

CudaDriver::CudaDriver(void* library, std::unique_ptr<Functions> functions)
    : library_(library), functions_(std::move(functions)) {}

CudaDriver::~CudaDriver() { ::dlclose(library_); }

void CudaDriver::Check(CuResult result, const std::string& what) const {
  if (result == 0) return;
  const char* name = nullptr;
  functions_->cuGetErrorName(result, &name);
  const std::string label = name != nullptr ? name : "CUresult " + std::to_string(result);
  throw Error(StatusCode::kInternal, what + " failed: " + label);
}

std::string CudaDriver::DeviceUuid(int ordinal) const {
  CuDevice device = 0;
  Check(functions_->cuDeviceGet(&device, ordinal), "cuDeviceGet");
  CuUuidAbi uuid{};
  Check(functions_->cuDeviceGetUuid(&uuid, device), "cuDeviceGetUuid");
  std::string text = "GPU-";
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) text += '-';
    char pair[3];
    std::snprintf(pair, sizeof(pair), "%02x", uuid.bytes[i]);
    text += pair;
  }
  return text;
}

CuContext CudaDriver::CurrentContext() const {
  CuContext context = nullptr;
  Check(functions_->cuCtxGetCurrent(&context), "cuCtxGetCurrent");
  return context;
}

bool CudaDriver::StreamIsCapturing(CuStream stream) const {
  int status = kCaptureStatusNone;
  Check(functions_->cuStreamIsCapturing(stream, &status), "cuStreamIsCapturing");
  return status != kCaptureStatusNone;
}

void CudaDriver::RecordEvent(CuEvent event, CuStream stream) const {
  Check(functions_->cuEventRecord(event, stream), "cuEventRecord");
}

CuModule CudaDriver::LoadModule(const char* ptx) const {
  CuModule module = nullptr;
  Check(functions_->cuModuleLoadData(&module, ptx), "cuModuleLoadData");
  return module;
}

CuFunction CudaDriver::ModuleFunction(CuModule module, const char* name) const {
  CuFunction function = nullptr;
  Check(functions_->cuModuleGetFunction(&function, module, name),
        std::string("cuModuleGetFunction(") + name + ")");
  return function;
}

void CudaDriver::Launch(CuFunction function, unsigned blocks, unsigned threads, CuStream stream,
                        void** arguments) const {
  Check(functions_->cuLaunchKernel(function, blocks, 1, 1, threads, 1, 1, 0, stream, arguments,
                                   nullptr),
        "cuLaunchKernel");
}

int CudaDriver::MultiprocessorCount() const {
  CuDevice device = 0;
  Check(functions_->cuCtxGetDevice(&device), "cuCtxGetDevice");
  int count = 0;
  Check(functions_->cuDeviceGetAttribute(&count, kMultiprocessorCountAttribute, device),
        "cuDeviceGetAttribute(MULTIPROCESSOR_COUNT)");
  return count;
}

IpcMemory::IpcMemory(const IpcHandleBytes& handle) : driver_(CudaDriver::Get()) {
  context_ = driver_->CurrentContext();
  if (context_ == nullptr) {
    throw Error(StatusCode::kFailedPrecondition,
                "cuIpcOpenMemHandle needs a current CUDA context (make torch's primary "
                "context current first)");
  }
  driver_->Check(driver_->functions().cuIpcOpenMemHandle(&pointer_, ToHandle(handle),
                                                         kLazyEnablePeerAccess),
                 "cuIpcOpenMemHandle");
}

IpcMemory::~IpcMemory() {
  if (pointer_ == 0) return;
  // The mapping belongs to the context it was opened in; this thread may have another current.
  const CudaDriver::Functions& f = driver_->functions();
  if (f.cuCtxPushCurrent(context_) != 0) return;
  (void)f.cuIpcCloseMemHandle(pointer_);
  CuContext popped = nullptr;
  (void)f.cuCtxPopCurrent(&popped);
}

IpcEvent::IpcEvent(const IpcHandleBytes& handle) : driver_(CudaDriver::Get()) {
  driver_->Check(driver_->functions().cuIpcOpenEventHandle(&event_, ToHandle(handle)),
                 "cuIpcOpenEventHandle");
}

IpcEvent::~IpcEvent() {
  if (event_ != nullptr) (void)driver_->functions().cuEventDestroy(event_);
}

}  // namespace ddo::consumer
