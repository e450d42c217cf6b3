// File: client-cpp/src/consumer/byte_cast.cc
#include "client-cpp/src/consumer/byte_cast.h"

#include <ATen/core/grad_mode.h>
#include <c10/core/DeviceGuard.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <utility>

#include "client-cpp/src/consumer/cuda_driver.h"
#include "client-cpp/src/consumer/device_stream.h"
#include "ddo/status.h"

namespace ddo::consumer {
namespace {

constexpr unsigned kThreads = 256;          // per block (the kernels load the table with them)
constexpr unsigned kBlocksPerSm = 8;        // 2048 threads: a full SM
constexpr int64_t kElementsPerThread = 16;  // one 16-byte load

// The kernels of one CUDA context.
struct Kernels {
  CuFunction u16 = nullptr;
  CuFunction u32 = nullptr;
  unsigned max_blocks = 0;
};

struct State {
  std::mutex mutex;
  std::atomic<bool> on{false};
  std::string ptx;
  ByteCastReporter reporter;
  std::shared_ptr<const CudaDriver> driver;
  std::map<CuContext, Kernels> kernels;
  // (device index, source dtype, destination dtype) -> the 256 output bit patterns.
  std::map<std::tuple<int, int, int>, at::Tensor> tables;
};

State& GetState() {
  static State* state = new State;  // never destroyed: casts may run during exit
  return *state;
}

bool IsOutputDtype(at::ScalarType dtype) {
  return dtype == at::kBFloat16 || dtype == at::kHalf || dtype == at::kFloat;
}

// The kernels of the current context, loaded on first use. Holds state.mutex.
const Kernels& KernelsOf(State& state, CuContext context) {
  auto found = state.kernels.find(context);
  if (found != state.kernels.end()) return found->second;
  const CudaDriver& driver = *state.driver;
  const CuModule module = driver.LoadModule(state.ptx.c_str());
  Kernels kernels;
  kernels.u16 = driver.ModuleFunction(module, "ddo_byte_cast_u16");
  kernels.u32 = driver.ModuleFunction(module, "ddo_byte_cast_u32");
  const int sms = driver.MultiprocessorCount();
  kernels.max_blocks = static_cast<unsigned>(std::max(sms, 1)) * kBlocksPerSm;
  return state.kernels.emplace(context, kernels).first->second;
}

// The table for `source` -> `dtype` on `device`, made by torch on first use. Holds
// state.mutex.
const at::Tensor& TableOf(State& state, const c10::Device& device, at::ScalarType source,
                          at::ScalarType dtype) {
  const auto key = std::make_tuple(static_cast<int>(device.index()), static_cast<int>(source),
                                   static_cast<int>(dtype));
  auto found = state.tables.find(key);
  if (found != state.tables.end()) return found->second;
  at::Tensor table = at::arange(256, at::TensorOptions().dtype(at::kByte).device(device))
                         .view(source)
                         .to(dtype)
                         .contiguous();
  // Made on this stream, used later on any: wait for it once (a copy to the host syncs).
  (void)table.cpu();
  return state.tables.emplace(key, std::move(table)).first->second;
}

// The kernels' cast; ddo::Error when the driver fails. Null result: not now (no current
// context, or a graph capture), torch's cast instead.
at::Tensor LaunchCast(State& state, const at::Tensor& tensor, at::ScalarType dtype) {
  const c10::Device device = tensor.device();
  const c10::DeviceGuard guard(device);  // torch's primary context of the device, current
  const CuStream stream = CurrentCudaStream(device);
  std::lock_guard<std::mutex> lock(state.mutex);
  if (!state.driver) state.driver = CudaDriver::Get();
  const CudaDriver& driver = *state.driver;
  const CuContext context = driver.CurrentContext();
  if (context == nullptr || driver.StreamIsCapturing(stream)) return at::Tensor();
  const Kernels& kernels = KernelsOf(state, context);
  const at::Tensor& table = TableOf(state, device, tensor.scalar_type(), dtype);
  at::Tensor out = at::empty(tensor.sizes(), tensor.options().dtype(dtype));
  uint64_t count = static_cast<uint64_t>(tensor.numel());
  if (count == 0) return out;
  if (reinterpret_cast<uintptr_t>(out.data_ptr()) % 16 != 0) return at::Tensor();
  CuDevicePtr in_pointer = reinterpret_cast<CuDevicePtr>(tensor.data_ptr());
  CuDevicePtr out_pointer = reinterpret_cast<CuDevicePtr>(out.data_ptr());
  CuDevicePtr table_pointer = reinterpret_cast<CuDevicePtr>(table.data_ptr());
  void* arguments[] = {&in_pointer, &out_pointer, &table_pointer, &count};
  const uint64_t chunks = count / kElementsPerThread;
  const unsigned blocks = static_cast<unsigned>(std::clamp<uint64_t>(
      (chunks + kThreads - 1) / kThreads, 1, kernels.max_blocks));
  const CuFunction function = dtype == at::kFloat ? kernels.u32 : kernels.u16;
  driver.Launch(function, blocks, kThreads, stream, arguments);
  return out;
}

}  // namespace

void InstallByteCast(std::string ptx, ByteCastReporter reporter) {
  State& state = GetState();
  std::lock_guard<std::mutex> lock(state.mutex);
  state.on = !ptx.empty();
  state.ptx = std::move(ptx);
  state.reporter = std::move(reporter);
  state.kernels.clear();  // contexts load the new text (a module loaded before stays loaded)
}

bool ByteCastHandles(const at::Tensor& tensor, at::ScalarType dtype) {
  return GetState().on.load(std::memory_order_relaxed) && tensor.defined() &&
         tensor.is_cuda() && tensor.element_size() == 1 && tensor.is_floating_point() &&
         IsOutputDtype(dtype) && tensor.is_contiguous() &&
         !(tensor.requires_grad() && at::GradMode::is_enabled()) && TorchHasCuda();
}

at::Tensor CastWeight(const at::Tensor& tensor, at::ScalarType dtype) {
  if (!ByteCastHandles(tensor, dtype)) return tensor.to(dtype);
  State& state = GetState();
  try {
    at::Tensor out = LaunchCast(state, tensor, dtype);
    if (out.defined()) return out;
  } catch (const std::exception& error) {
    ByteCastReporter reporter;
    {
      std::lock_guard<std::mutex> lock(state.mutex);
      if (state.on.exchange(false)) reporter = std::move(state.reporter);
    }
    if (reporter) {
      reporter(std::string("DDO's fp8 cast kernel is off for this process, casts are torch's: ") +
               error.what());
    }
  }
  return tensor.to(dtype);
}

}  // namespace ddo::consumer
