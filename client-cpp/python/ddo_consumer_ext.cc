// File: client-cpp/python/ddo_consumer_ext.cc
//
// The Python client's hot path on the C++ ring consumer: a torch extension that
// diffusers_dynamic_offloader.cpp_consumer builds on first use (torch.utils.cpp_extension) and
// streaming.py uses in place of ring_consumer.RingConsumer (docs/plans/issue-18-client-cpp.md
// §5). It wraps the very consumer ddo::client runs (client-cpp/src/consumer), so the protocol
// code exists once.
//
// Python keeps owning every mapping: it passes the addresses of the control block and the
// doorbell it mapped, and the ring as a tensor; the session calls drop_views() and then close()
// before it unmaps them, and every later call raises instead of touching them. No gRPC, absl or
// protobuf here: the learned schedule goes back through a Python callable (SetSchedule).
//
// The GIL is held except while a wait sleeps on its futex (the lease thread and the runner's
// other threads go on meanwhile). That sleep is the one moment another thread can call in: a
// second forward is refused, and a close (drop_views) makes the waiting call raise
// SessionClosedError at its next wake-up and waits for it to leave before it frees anything, so
// Python never unmaps memory a wait still reads.
#include <torch/extension.h>

#include <Python.h>
#include <torch/csrc/Dtype.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "client-cpp/src/consumer/byte_cast.h"
#include "client-cpp/src/consumer/device_stream.h"
#include "client-cpp/src/consumer/ring_consumer.h"
#include "client-cpp/src/consumer/ring_events.h"
#include "client-cpp/src/consumer/ring_views.h"
#include "client-cpp/src/consumer/streamed_linear.h"
#include "ddo/status.h"

namespace py = pybind11;

namespace ddo::consumer {
namespace {

// The Python client's exception classes (errors.py), set once by init_errors.
struct PythonErrors {
  PyObject* ddo_error = nullptr;
  PyObject* streaming = nullptr;
  PyObject* graph_capture = nullptr;
  PyObject* session_closed = nullptr;
  PyObject* daemon_gone = nullptr;
};
PythonErrors errors;

// The Python client's advice in the backward's error (py/streamed_linear.py says the same).
constexpr const char* kPythonTrainingRemedy =
    "run inference under torch.no_grad() / torch.inference_mode(), or call "
    "remove_dynamic_offload() first to train on the module's own copy.";

void InitErrors(py::object ddo_error, py::object streaming, py::object graph_capture,
                py::object session_closed, py::object daemon_gone) {
  // Kept for the life of the process: the translator may run at any time.
  errors.ddo_error = ddo_error.release().ptr();
  errors.streaming = streaming.release().ptr();
  errors.graph_capture = graph_capture.release().ptr();
  errors.session_closed = session_closed.release().ptr();
  errors.daemon_gone = daemon_gone.release().ptr();
}

void SetPythonError(PyObject* type, PyObject* fallback, const char* message) {
  PyErr_SetString(type != nullptr ? type : fallback, message);
}

void TranslateError(std::exception_ptr thrown) {
  try {
    if (thrown) std::rethrow_exception(thrown);
  } catch (const DaemonGoneError& error) {
    SetPythonError(errors.daemon_gone, PyExc_RuntimeError, error.what());
  } catch (const SessionClosedError& error) {
    SetPythonError(errors.session_closed, PyExc_RuntimeError, error.what());
  } catch (const GraphCaptureError& error) {
    SetPythonError(errors.graph_capture, PyExc_RuntimeError, error.what());
  } catch (const StreamingError& error) {
    SetPythonError(errors.streaming, PyExc_RuntimeError, error.what());
  } catch (const Error& error) {
    SetPythonError(errors.ddo_error, PyExc_RuntimeError, error.what());
  }
}

at::ScalarType ScalarTypeOf(const py::handle& dtype) {
  if (!THPDtype_Check(dtype.ptr())) {
    throw Error(StatusCode::kInvalidArgument,
                "a unit layout names a dtype that is not a torch.dtype");
  }
  return reinterpret_cast<THPDtype*>(dtype.ptr())->scalar_type;
}

// byte_cast_install(ptx, report): the fp8 cast kernels' PTX (py/byte_cast.py reads it from
// the package; "" turns them off) and a callable told once, with the reason, if they fail.
void InstallByteCastFromPython(std::string ptx, py::object report) {
  ByteCastReporter reporter;
  if (!report.is_none()) {
    // Kept for the life of the process: a cast may fail at any time.
    PyObject* callable = report.release().ptr();
    reporter = [callable](const std::string& reason) {
      py::gil_scoped_acquire gil;
      try {
        const py::handle function(callable);
        function(reason);
      } catch (const py::error_already_set&) {
        // A failing logger must not fail the forward: the cast falls back all the same.
      }
    };
  }
  InstallByteCast(std::move(ptx), std::move(reporter));
}

// layouts[unit]: (name, offset in the unit, byte size, torch.dtype, shape) of each tensor, as
// ring_consumer.RingViews takes them.
std::vector<UnitLayout> Layouts(const py::sequence& layouts) {
  std::vector<UnitLayout> converted;
  converted.reserve(layouts.size());
  for (const py::handle& unit : layouts) {
    UnitLayout tensors;
    for (const py::handle& entry : py::reinterpret_borrow<py::sequence>(unit)) {
      auto fields = py::reinterpret_borrow<py::sequence>(entry);
      if (fields.size() != 5) {
        throw Error(StatusCode::kInvalidArgument,
                    "a unit layout entry is (name, offset, byte size, dtype, shape)");
      }
      tensors.push_back(TensorPlacement{fields[0].cast<std::string>(),
                                        fields[1].cast<uint64_t>(), fields[2].cast<uint64_t>(),
                                        ScalarTypeOf(fields[3]),
                                        fields[4].cast<std::vector<int64_t>>()});
    }
    converted.push_back(std::move(tensors));
  }
  return converted;
}

std::vector<IpcHandleBytes> Handles(const std::vector<py::bytes>& handles, const char* what) {
  std::vector<IpcHandleBytes> converted;
  for (const py::bytes& handle : handles) {
    const std::string bytes = handle;
    if (bytes.size() != kIpcHandleBytes) {
      throw Error(StatusCode::kFailedPrecondition,
                  std::string("ddod sent a ") + what + " event handle of " +
                      std::to_string(bytes.size()) + " bytes, not " +
                      std::to_string(kIpcHandleBytes));
    }
    IpcHandleBytes converted_handle;
    std::copy(bytes.begin(), bytes.end(), converted_handle.begin());
    converted.push_back(converted_handle);
  }
  return converted;
}

// One streamed Linear as the session patched it: where its weight lies and its bias.
struct LinearTap {
  uint32_t unit = 0;
  uint32_t index = 0;
  at::Tensor bias;  // undefined: none
  std::string module_path;
};

// The extension's RingConsumer: the interface of ring_consumer.RingConsumer over the C++ one.
class Consumer {
 public:
  Consumer(uintptr_t control, uint64_t control_bytes, std::string control_name,
           uintptr_t doorbell, uint64_t doorbell_bytes, std::string doorbell_name,
           uint32_t slots, uint64_t arena_bytes, at::Tensor ring, const py::sequence& layouts,
           std::vector<uint32_t> schedule, py::object send_schedule,
           const std::vector<py::bytes>& ready_events,
           const std::vector<py::bytes>& consumed_events, const std::string& device,
           double stall_timeout_seconds)
      : device_(device), send_schedule_(std::move(send_schedule)) {
    const std::vector<UnitLayout> units = Layouts(layouts);
    views_ = std::make_unique<RingViews>(std::move(ring), units);
    RingConsumerOptions options;
    options.control = reinterpret_cast<uint8_t*>(control);
    options.control_bytes = control_bytes;
    options.control_name = std::move(control_name);
    options.doorbell = reinterpret_cast<uint8_t*>(doorbell);
    options.doorbell_bytes = doorbell_bytes;
    options.doorbell_name = std::move(doorbell_name);
    options.slots = slots;
    options.units = views_->unit_count();
    options.arena_bytes = arena_bytes;
    options.unit_spans = views_->spans();
    options.schedule = std::move(schedule);
    options.stall_timeout_ns = static_cast<int64_t>(stall_timeout_seconds * 1e9);
    if (device_.is_cuda()) {
      CudaDeviceScope scope(device_);
      const c10::Device where = device_;
      events_ = std::make_unique<RingEvents>(Handles(ready_events, "ready"),
                                             Handles(consumed_events, "consumed"), slots,
                                             [where] { return CurrentCudaStream(where); });
      RingEvents* events = events_.get();
      options.record_consumed = [events](uint32_t slot) { events->RecordConsumed(slot); };
      options.before_switch = [events] { events->RefuseCapture("a streamed Linear"); };
    }
    options.before_sleep = [this] { sleeping_thread_ = PyEval_SaveThread(); };
    options.after_sleep = [this] {
      PyEval_RestoreThread(sleeping_thread_);
      sleeping_thread_ = nullptr;
      if (closing_) {
        throw SessionClosedError(StatusCode::kCancelled,
                                 "the streaming session was closed by another thread while this "
                                 "forward waited for ddod");
      }
    };
    consumer_ = std::make_unique<RingConsumer>(std::move(options));
  }

  // The hot path: the views of `unit`'s tensors, switching the unit in when it is not held.
  py::tuple Tensors(uint32_t unit) {
    InUse in_use(*this);
    const uint64_t offset = consumer_->Acquire(unit);
    if (int64_t{unit} == tuple_unit_ && offset == tuple_offset_) return held_tuple_;
    const UnitViews& views = views_->Views(unit, offset);
    py::tuple tuple(views.size());
    for (size_t i = 0; i < views.size(); ++i) tuple[i] = py::cast(views[i]);
    held_tuple_ = tuple;
    tuple_unit_ = unit;
    tuple_offset_ = offset;
    return tuple;
  }

  // A streamed Linear's forward registered once (the session patches each Linear with its
  // tap), so a call converts no strings: returns the tap's number.
  uint32_t AddLinear(uint32_t unit, uint32_t index, std::optional<at::Tensor> bias,
                     std::string module_path) {
    if (unit >= views_->unit_count()) {
      throw StreamingError(StatusCode::kInvalidArgument,
                           "unit " + std::to_string(unit) + " does not exist (the session has " +
                               std::to_string(views_->unit_count()) + " units)");
    }
    taps_.push_back(LinearTap{unit, index, bias.value_or(at::Tensor()), std::move(module_path)});
    return static_cast<uint32_t>(taps_.size() - 1);
  }

  // The whole forward of Linear `tap` on `input`, in C++ (StreamedLinear: the weight and bias
  // cast to the input's dtype, and a backward that raises in grad mode).
  at::Tensor Linear(uint32_t tap, const at::Tensor& input) {
    InUse in_use(*this);
    const LinearTap& linear = taps_.at(tap);
    const uint64_t offset = consumer_->Acquire(linear.unit);
    const UnitViews& views = views_->Views(linear.unit, offset);
    return StreamedLinear(input, views.at(linear.index), linear.bias, linear.module_path,
                          AtenLinear, kPythonTrainingRemedy);
  }

  void BeginForward() {
    InUse in_use(*this);
    if (events_ != nullptr) events_->RefuseCapture("the streamed module");
    consumer_->BeginForward();
  }

  void EndForward() {
    std::vector<uint32_t> order;
    {
      InUse in_use(*this);
      order = consumer_->EndForward();
      ForgetTuple();
    }
    if (order.empty()) return;
    const uint64_t accepted = send_schedule_(order).cast<uint64_t>();  // Python: SetSchedule
    InUse in_use(*this);
    consumer_->AdoptSchedule(std::move(order), accepted);
  }

  // Releases the held unit. Nothing while another thread's call waits (the session's close
  // does this first; drop_views then deals with that call).
  void Release() {
    if (consumer_ == nullptr || busy_ > 0) return;
    consumer_->Release();
    ForgetTuple();
  }

  // Forgets every view of the ring (before its memory is closed); the consumer is closed. A
  // call of another thread waiting for ddod raises SessionClosedError when it next wakes (within
  // a futex slice, 2 ms); this waits for it to leave first.
  void DropViews() {
    closing_ = true;
    while (busy_ > 0) {
      py::gil_scoped_release let_go;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    ForgetTuple();
    taps_.clear();
    if (views_ != nullptr) views_->Close();
    if (consumer_ != nullptr) {
      consumer_->ForgetHeld();
      closed_statistics_ = consumer_->statistics();
      closed_schedule_ = consumer_->schedule();
    }
    consumer_.reset();  // nothing reads the block or the doorbell from here on
    events_.reset();
    views_.reset();
    send_schedule_ = py::none();
  }

  py::tuple Schedule() const {
    return py::cast(consumer_ != nullptr ? consumer_->schedule() : closed_schedule_);
  }
  bool Learning() const { return consumer_ != nullptr ? consumer_->learning() : false; }
  py::object HeldUnit() const {
    if (consumer_ == nullptr || consumer_->held_unit() < 0) return py::none();
    return py::int_(consumer_->held_unit());
  }
  const ConsumerStatistics& Stats() const {
    return consumer_ != nullptr ? consumer_->statistics() : closed_statistics_;
  }

  py::dict Statistics() const {
    const ConsumerStatistics& stats = Stats();
    py::dict counters;
    counters["uses"] = stats.uses;
    counters["streamed_uses"] = stats.streamed_uses;
    counters["sync_uses"] = stats.sync_uses;
    counters["skipped_uses"] = stats.skipped_uses;
    counters["bytes_used"] = stats.bytes_used;
    counters["wait_seconds"] = stats.wait_seconds();
    counters["overhead_us_per_unit"] = stats.overhead_us_per_unit();
    return counters;
  }

 private:
  // A call that may wait for ddod with the GIL let go: refused once the session is closed, and
  // while another thread's call waits (one forward at a time per session).
  class InUse {
   public:
    explicit InUse(Consumer& consumer) : consumer_(consumer) {
      if (consumer_.closing_ || consumer_.consumer_ == nullptr) {
        throw SessionClosedError(StatusCode::kFailedPrecondition,
                                 "the streaming session is closed: its ring is gone");
      }
      if (consumer_.busy_ > 0) {
        throw StreamingError(StatusCode::kFailedPrecondition,
                             "another thread is running a forward of this streaming session "
                             "(one forward at a time per session)");
      }
      ++consumer_.busy_;
    }
    ~InUse() { --consumer_.busy_; }
    InUse(const InUse&) = delete;
    InUse& operator=(const InUse&) = delete;

   private:
    Consumer& consumer_;
  };

  void ForgetTuple() {
    held_tuple_ = py::tuple();
    tuple_unit_ = -1;
  }

  c10::Device device_;
  py::object send_schedule_;
  std::unique_ptr<RingViews> views_;
  std::unique_ptr<RingEvents> events_;
  std::unique_ptr<RingConsumer> consumer_;
  std::vector<LinearTap> taps_;
  // The tuple Tensors returned last, and for which placement.
  py::tuple held_tuple_;
  int64_t tuple_unit_ = -1;
  uint64_t tuple_offset_ = 0;
  PyThreadState* sleeping_thread_ = nullptr;
  int busy_ = 0;          // calls in progress (at most one: see InUse)
  bool closing_ = false;  // drop_views began
  ConsumerStatistics closed_statistics_;
  std::vector<uint32_t> closed_schedule_;
};

}  // namespace
}  // namespace ddo::consumer

PYBIND11_MODULE(TORCH_EXTENSION_NAME, module) {
  using ddo::consumer::Consumer;
  module.doc() = "The ring consumer of diffusers_dynamic_offloader in C++ (client-cpp).";
  py::register_exception_translator(&ddo::consumer::TranslateError);
  module.def("init_errors", &ddo::consumer::InitErrors, py::arg("ddo_error"),
             py::arg("streaming"), py::arg("graph_capture"), py::arg("session_closed"),
             py::arg("daemon_gone"));
  module.def("byte_cast_install", &ddo::consumer::InstallByteCastFromPython, py::arg("ptx"),
             py::arg("report"));
  module.def(
      "byte_cast",
      [](const at::Tensor& tensor, const py::handle& dtype) {
        return ddo::consumer::CastWeight(tensor, ddo::consumer::ScalarTypeOf(dtype));
      },
      py::arg("tensor"), py::arg("dtype"));
  module.def(
      "byte_cast_handles",
      [](const at::Tensor& tensor, const py::handle& dtype) {
        return ddo::consumer::ByteCastHandles(tensor, ddo::consumer::ScalarTypeOf(dtype));
      },
      py::arg("tensor"), py::arg("dtype"));
  py::class_<Consumer>(module, "Consumer")
      .def(py::init<uintptr_t, uint64_t, std::string, uintptr_t, uint64_t, std::string,
                    uint32_t, uint64_t, at::Tensor, const py::sequence&, std::vector<uint32_t>,
                    py::object, const std::vector<py::bytes>&, const std::vector<py::bytes>&,
                    const std::string&, double>(),
           py::arg("control"), py::arg("control_bytes"), py::arg("control_name"),
           py::arg("doorbell"), py::arg("doorbell_bytes"), py::arg("doorbell_name"),
           py::arg("slots"), py::arg("arena_bytes"), py::arg("ring"), py::arg("layouts"),
           py::arg("schedule"), py::arg("send_schedule"), py::arg("ready_events"), py::arg("consumed_events"),
           py::arg("device"), py::arg("stall_timeout"))
      .def("tensors", &Consumer::Tensors, py::arg("unit"))
      .def("add_linear", &Consumer::AddLinear, py::arg("unit"), py::arg("index"),
           py::arg("bias"), py::arg("module_path"))
      .def("linear", &Consumer::Linear, py::arg("tap"), py::arg("input"))
      .def("begin_forward", &Consumer::BeginForward)
      .def("end_forward", &Consumer::EndForward)
      .def("release", &Consumer::Release)
      .def("drop_views", &Consumer::DropViews)
      .def("statistics", &Consumer::Statistics)
      .def_property_readonly("schedule", &Consumer::Schedule)
      .def_property_readonly("learning", &Consumer::Learning)
      .def_property_readonly("held_unit", &Consumer::HeldUnit)
      .def_property_readonly("uses", [](const Consumer& c) { return c.Stats().uses; })
      .def_property_readonly("streamed_uses",
                             [](const Consumer& c) { return c.Stats().streamed_uses; })
      .def_property_readonly("sync_uses", [](const Consumer& c) { return c.Stats().sync_uses; })
      .def_property_readonly("skipped_uses",
                             [](const Consumer& c) { return c.Stats().skipped_uses; })
      .def_property_readonly("bytes_used", [](const Consumer& c) { return c.Stats().bytes_used; })
      .def_property_readonly("wait_ns", [](const Consumer& c) { return c.Stats().wait_ns; })
      .def_property_readonly("overhead_ns",
                             [](const Consumer& c) { return c.Stats().overhead_ns; });
}
