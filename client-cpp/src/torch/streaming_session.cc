// File: client-cpp/src/torch/streaming_session.cc
//
// ddo::stream and ddo::StreamingSession: the C++ port of py/streaming.py's session without the
// Python-only parts (weight guards and edit sync, PEFT adapters, fused LoRA: a C++ module has
// none of them). Open: Attach with the streamable names, map the pool, the slab, the ring, the
// control block and the doorbell (and on a GPU the ring's events), check the plan against the
// module, bind resident tensors to the slab and streamed weights to the pool, and give every
// streamed ddo::nn::Linear a tap on the ring consumer. Close, in the order the protocol needs
// (docs/protocol.md "Closing a streaming session"): release the held unit, wait for the
// device, give the module its host tensors back, drop every view, close events, doorbell,
// block, ring and slab, and Detach.
#include "ddo/streaming.h"

#include <regex>
#include <set>
#include <utility>

#include <torch/nn/modules/linear.h>

#include "client-cpp/src/consumer/control_block.h"
#include "client-cpp/src/consumer/cuda_driver.h"
#include "client-cpp/src/consumer/device_stream.h"
#include "client-cpp/src/consumer/ring_consumer.h"
#include "client-cpp/src/consumer/ring_events.h"
#include "client-cpp/src/consumer/ring_views.h"
#include "ddo/client.h"
#include "ddo/nn.h"
#include "ddo/wire/control_layout.h"
#include "client-cpp/src/torch/dtypes.h"
#include "client-cpp/src/torch/device_memory.h"
#include "client-cpp/src/torch/module_tensors.h"
#include "client-cpp/src/torch/pool_views.h"
#include "client-cpp/src/torch/shared_mapping.h"
#include "client-cpp/src/torch/stream_tap.h"

namespace ddo {
namespace {

using detail::ModuleTensor;

// The weight of a ddo::nn::Linear that a session may stream: 2-D floating, (out, in).
bool IsStreamableLinearWeight(const ModuleTensor& entry) {
  const auto* linear = dynamic_cast<const nn::LinearImpl*>(entry.owner);
  if (linear == nullptr || entry.attribute != "weight" || entry.is_buffer) return false;
  const torch::Tensor& weight = entry.tensor;
  return weight.dim() == 2 && weight.is_floating_point() &&
         weight.size(0) == linear->options.out_features() &&
         weight.size(1) == linear->options.in_features();
}

std::vector<std::string> StreamableNames(
    const std::vector<std::vector<ModuleTensor>>& groups,
    const std::vector<std::string>& keep_resident) {
  std::vector<std::regex> patterns;
  for (const std::string& pattern : keep_resident) {
    try {
      patterns.emplace_back(pattern, std::regex::ECMAScript);
    } catch (const std::regex_error& error) {
      throw Error(StatusCode::kInvalidArgument,
                  "keep_resident pattern '" + pattern + "': " + error.what());
    }
  }
  std::vector<std::string> names;
  for (const auto& group : groups) {
    bool streamable = true;
    for (const ModuleTensor& entry : group) {
      streamable = streamable && IsStreamableLinearWeight(entry);
      for (const std::regex& pattern : patterns) {
        streamable = streamable && !std::regex_search(entry.module_path, pattern);
      }
    }
    if (streamable) names.push_back(group.front().name);
  }
  return names;
}

// StreamSettings::strict: plain torch::nn::Linear layers could only be resident.
void RefusePlainLinears(torch::nn::Module& module) {
  std::vector<std::string> plain;
  for (const auto& group : detail::AliasGroups(detail::ModuleTensors(module))) {
    for (const ModuleTensor& entry : group) {
      if (entry.attribute == "weight" &&
          dynamic_cast<const torch::nn::LinearImpl*>(entry.owner) != nullptr) {
        plain.push_back(entry.module_path);
      }
    }
  }
  if (!plain.empty()) {
    throw BindError(StatusCode::kInvalidArgument,
                    "strict: " + std::to_string(plain.size()) +
                        " plain torch::nn::Linear layers cannot stream (declare them as "
                        "ddo::nn::Linear): " + detail::DescribeNames(plain));
  }
}

struct ResolvedDevice {
  torch::Device device;
  std::string uuid;  // what Attach names it by
};

ResolvedDevice ResolveDevice(const torch::Device& device) {
  if (device.is_cpu()) {
    if (device.has_index() && device.index() > 0) {
      return {torch::Device(torch::kCPU), "cpu:" + std::to_string(device.index())};
    }
    return {torch::Device(torch::kCPU), "cpu"};
  }
  if (!device.is_cuda()) {
    throw Error(StatusCode::kInvalidArgument,
                "device " + device.str() +
                    ": streaming sessions run on 'cpu' (the host backend) or a CUDA device");
  }
  if (!consumer::TorchHasCuda()) {
    throw Error(StatusCode::kFailedPrecondition,
                "device " + device.str() + ": this libtorch has no CUDA");
  }
  const int index = device.has_index() ? device.index() : 0;
  // The driver's ordinal equals torch's index in one process (both honour
  // CUDA_VISIBLE_DEVICES).
  return {torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(index)),
          consumer::CudaDriver::Get()->DeviceUuid(index)};
}

struct StreamedAt {
  uint32_t unit;
  uint32_t index;
};

}  // namespace

// The unit source the taps use: the ring consumer and its views, until the session closes.
class ConsumerUnits : public detail::UnitSource {
 public:
  ConsumerUnits(consumer::RingConsumer* consumer, consumer::RingViews* views)
      : consumer_(consumer), views_(views) {}

  const std::vector<torch::Tensor>& Acquire(uint32_t unit) override {
    if (consumer_ == nullptr) {
      throw SessionClosedError(StatusCode::kFailedPrecondition,
                               "the streaming session is closed: its module's streamed "
                               "Linears have no weights to take");
    }
    return views_->Views(unit, consumer_->Acquire(unit));
  }
  void Close() {
    consumer_ = nullptr;
    views_ = nullptr;
  }

 private:
  consumer::RingConsumer* consumer_;
  consumer::RingViews* views_;
};

class StreamingSession::Impl {
 public:
  Impl(std::shared_ptr<RpcClient> rpc, torch::nn::Module& module, AttachAnswer answer,
       ResolvedDevice device, const StreamSettings& settings)
      : rpc_(std::move(rpc)),
        module_(module),
        answer_(std::move(answer)),
        device_(device.device),
        stall_timeout_ns_(static_cast<int64_t>(settings.stall_timeout_s * 1e9)) {}

  ~Impl() { Close(); }

  void Open();
  void BeginForward();
  void EndForward();
  void Close() noexcept;

  bool closed() const { return closed_; }
  const AttachAnswer& answer() const { return answer_; }
  torch::Device device() const { return device_; }
  StreamStats Stats() const;
  std::vector<uint32_t> Schedule() const {
    return consumer_ ? consumer_->schedule() : answer_.schedule;
  }

 private:
  std::map<std::string, torch::Tensor> ResidentViews(const DeviceResources& resources);
  std::map<std::string, StreamedAt> StreamedLayout(const DeviceResources& resources);
  void CheckCoverage(const std::map<std::string, torch::Tensor>& resident,
                     const std::map<std::string, StreamedAt>& streamed);
  void OpenConsumer(const DeviceResources& resources);
  void Patch(const std::map<std::string, StreamedAt>& streamed);
  void Rebind(const std::map<std::string, torch::Tensor>& resident);
  void RestoreHostTensors() noexcept;
  void WaitForDevice() noexcept;

  std::shared_ptr<RpcClient> rpc_;
  torch::nn::Module& module_;
  AttachAnswer answer_;
  torch::Device device_;
  int64_t stall_timeout_ns_;
  bool closed_ = false;
  bool bound_ = false;

  std::map<std::string, const TensorSpec*> specs_;
  std::vector<std::pair<std::string, std::vector<ModuleTensor>>> groups_;
  std::map<std::string, torch::Tensor> pool_views_;
  std::unique_ptr<detail::DeviceMemory> slab_;
  std::unique_ptr<detail::DeviceMemory> ring_;
  std::shared_ptr<detail::SharedMapping> block_mapping_;
  std::shared_ptr<detail::SharedMapping> doorbell_mapping_;
  std::unique_ptr<consumer::RingEvents> events_;
  std::unique_ptr<consumer::RingViews> views_;
  std::unique_ptr<consumer::RingConsumer> consumer_;
  std::shared_ptr<ConsumerUnits> units_;
  std::vector<nn::LinearImpl*> patched_;
};

void StreamingSession::Impl::Open() {
  if (!answer_.device || answer_.device->control_block_shm.empty()) {
    throw Error(StatusCode::kFailedPrecondition,
                "ddod answered the streaming Attach of '" + answer_.component.cache_key +
                    "' without device resources (is ddod older than this client?)");
  }
  const DeviceResources& resources = *answer_.device;
  for (const TensorSpec& spec : answer_.component.tensors) specs_.emplace(spec.name, &spec);
  pool_views_ = detail::MapComponent(*rpc_, answer_.component);

  std::map<std::string, detail::DeclaredTensor> declared;
  for (const auto& [name, view] : pool_views_) {
    declared.emplace(name, detail::DeclaredTensor{view.scalar_type(), view.sizes().vec()});
  }
  detail::ModuleMatch match = detail::MatchModule(module_, declared);
  if (!match.ok()) {
    std::string text = "cannot stream '" + answer_.component.cache_key + "' into the module: ";
    std::vector<std::string> parts;
    if (!match.missing.empty()) {
      parts.push_back(std::to_string(match.missing.size()) + " missing from the component: " +
                      detail::DescribeNames(match.missing));
    }
    if (!match.unexpected.empty()) {
      parts.push_back(std::to_string(match.unexpected.size()) + " not in the module: " +
                      detail::DescribeNames(match.unexpected));
    }
    if (!match.mismatched.empty()) {
      std::string mismatched = std::to_string(match.mismatched.size()) +
                               " with another shape or dtype: ";
      for (size_t i = 0; i < match.mismatched.size() && i < 20; ++i) {
        mismatched += (i ? "; " : "") + match.mismatched[i];
      }
      parts.push_back(mismatched);
    }
    for (size_t i = 0; i < parts.size(); ++i) text += (i ? "; " : "") + parts[i];
    throw BindError(StatusCode::kInvalidArgument, text);
  }
  groups_ = std::move(match.groups);

  {
    std::optional<consumer::CudaDeviceScope> scope;
    if (device_.is_cuda()) scope.emplace(device_);
    slab_ = detail::DeviceMemory::Open(*rpc_, "resident slab", resources.resident_slab_bytes,
                                       resources.resident_slab_shm,
                                       resources.has_resident_slab_handle
                                           ? &resources.resident_slab_handle : nullptr,
                                       device_, detail::MapMode::kCopyOnWrite);
    // The arena (the schedule's units, packed) and the out-of-schedule slot after it. ddod
    // keeps refilling it: mapped shared, so every update shows.
    ring_ = detail::DeviceMemory::Open(
        *rpc_, "ring",
        resources.units.empty() ? 0 : resources.ring_arena_bytes + resources.ring_slot_bytes,
        resources.ring_shm, resources.has_ring_handle ? &resources.ring_handle : nullptr,
        device_, detail::MapMode::kSharedReadOnly);
  }
  std::map<std::string, torch::Tensor> resident = ResidentViews(resources);
  std::map<std::string, StreamedAt> streamed = StreamedLayout(resources);
  CheckCoverage(resident, streamed);

  bound_ = true;  // from here on, close() gives the module its host tensors back
  Rebind(resident);
  if (resources.units.empty()) return;  // everything is resident: nothing streams
  OpenConsumer(resources);
  Patch(streamed);
}

std::map<std::string, torch::Tensor> StreamingSession::Impl::ResidentViews(
    const DeviceResources& resources) {
  std::map<std::string, torch::Tensor> views;
  for (const Placement& placement : resources.resident) {
    auto spec = specs_.find(placement.name);
    if (spec == specs_.end()) {
      throw Error(StatusCode::kInternal,
                  "ddod placed '" + placement.name + "' (resident), which the component lacks");
    }
    if (placement.byte_size != spec->second->byte_size) {
      throw Error(StatusCode::kInternal,
                  "ddod placed " + std::to_string(placement.byte_size) + " bytes of '" +
                      placement.name + "' in the slab; its spec says " +
                      std::to_string(spec->second->byte_size));
    }
    views.emplace(placement.name,
                  slab_->View(placement.offset, placement.byte_size,
                              *detail::TorchType(static_cast<int>(spec->second->dtype)),
                              spec->second->shape, placement.name));
  }
  return views;
}

std::map<std::string, StreamedAt> StreamingSession::Impl::StreamedLayout(
    const DeviceResources& resources) {
  std::map<std::string, StreamedAt> streamed;
  for (uint32_t unit = 0; unit < resources.units.size(); ++unit) {
    const UnitLayout& layout = resources.units[unit];
    if (layout.unit != unit) {
      throw Error(StatusCode::kInternal, "ddod listed unit " + std::to_string(layout.unit) +
                                             " at position " + std::to_string(unit));
    }
    if (layout.tensors.empty()) {
      throw Error(StatusCode::kInternal, "ddod sent unit " + std::to_string(unit) + " ('" +
                                             layout.name + "') without tensors");
    }
    for (uint32_t index = 0; index < layout.tensors.size(); ++index) {
      const Placement& placement = layout.tensors[index];
      auto spec = specs_.find(placement.name);
      if (spec == specs_.end() || placement.byte_size != spec->second->byte_size ||
          placement.offset + placement.byte_size > resources.ring_slot_bytes) {
        throw Error(StatusCode::kInternal,
                    "ddod placed '" + placement.name + "' of unit " + std::to_string(unit) +
                        " at bytes [" + std::to_string(placement.offset) + ", " +
                        std::to_string(placement.offset + placement.byte_size) + ") of a " +
                        std::to_string(resources.ring_slot_bytes) + "-byte slot");
      }
      if (!streamed.emplace(placement.name, StreamedAt{unit, index}).second) {
        throw Error(StatusCode::kInternal, "ddod streams '" + placement.name + "' in two units");
      }
    }
  }
  return streamed;
}

void StreamingSession::Impl::CheckCoverage(const std::map<std::string, torch::Tensor>& resident,
                                           const std::map<std::string, StreamedAt>& streamed) {
  std::vector<std::string> uncovered;
  std::vector<std::string> both;
  std::vector<std::string> not_linear;
  for (const auto& [name, group] : groups_) {
    const bool is_resident = resident.count(name) != 0;
    const bool is_streamed = streamed.count(name) != 0;
    if (!is_resident && !is_streamed) uncovered.push_back(name);
    if (is_resident && is_streamed) both.push_back(name);
    if (is_streamed) {
      for (const ModuleTensor& entry : group) {
        if (!IsStreamableLinearWeight(entry)) {
          not_linear.push_back(name);
          break;
        }
      }
    }
  }
  std::vector<std::string> problems;
  if (!uncovered.empty()) {
    problems.push_back("neither resident nor streamed: " + detail::DescribeNames(uncovered));
  }
  if (!both.empty()) {
    problems.push_back("both resident and streamed: " + detail::DescribeNames(both));
  }
  if (!not_linear.empty()) {
    problems.push_back("streamed but not a ddo::nn::Linear weight: " +
                       detail::DescribeNames(not_linear));
  }
  if (problems.empty()) return;
  std::string text = "ddod's plan for '" + answer_.component.cache_key +
                     "' does not fit the module: ";
  for (size_t i = 0; i < problems.size(); ++i) text += (i ? "; " : "") + problems[i];
  throw Error(StatusCode::kInternal, text);
}

// Resident tensors to their slab views; streamed weights to their host pool views (so an
// unstreamed use, or the module after close, still sees the right weights).
void StreamingSession::Impl::Rebind(const std::map<std::string, torch::Tensor>& resident) {
  for (const auto& [name, group] : groups_) {
    auto view = resident.find(name);
    detail::Rebind(group, view != resident.end() ? view->second : pool_views_.at(name));
  }
}

void StreamingSession::Impl::OpenConsumer(const DeviceResources& resources) {
  UniqueFd block_fd = ValueOrThrow(rpc_->open_segment(resources.control_block_shm, true));
  block_mapping_ = ValueOrThrow(detail::SharedMapping::Map(
      block_fd.get(), resources.control_block_bytes, detail::MapMode::kSharedWritable,
      resources.control_block_shm));
  UniqueFd bell_fd = ValueOrThrow(rpc_->open_segment(resources.doorbell_shm, true));
  doorbell_mapping_ = ValueOrThrow(detail::SharedMapping::Map(
      bell_fd.get(), doorbell_layout::kBytes, detail::MapMode::kSharedWritable,
      resources.doorbell_shm));

  std::vector<consumer::UnitLayout> layouts;
  for (const UnitLayout& unit : resources.units) {
    consumer::UnitLayout tensors;
    for (const Placement& placement : unit.tensors) {
      const TensorSpec& spec = *specs_.at(placement.name);
      tensors.push_back(consumer::TensorPlacement{
          placement.name, placement.offset, placement.byte_size,
          *detail::TorchType(static_cast<int>(spec.dtype)), spec.shape});
    }
    layouts.push_back(std::move(tensors));
  }
  views_ = std::make_unique<consumer::RingViews>(ring_->Whole(), layouts);

  consumer::RingConsumerOptions options;
  options.control = block_mapping_->data();
  options.control_bytes = block_mapping_->size();
  options.control_name = resources.control_block_shm;
  options.doorbell = doorbell_mapping_->data();
  options.doorbell_bytes = doorbell_mapping_->size();
  options.doorbell_name = resources.doorbell_shm;
  options.slots = resources.ring_slots;
  options.units = static_cast<uint32_t>(resources.units.size());
  options.arena_bytes = resources.ring_arena_bytes;
  options.unit_spans = views_->spans();
  options.schedule = answer_.schedule;
  options.daemon_pid = resources.daemon_pid > 0 ? resources.daemon_pid : -1;
  options.stall_timeout_ns = stall_timeout_ns_;
  if (device_.is_cuda()) {
    consumer::CudaDeviceScope scope(device_);
    const torch::Device device = device_;
    events_ = std::make_unique<consumer::RingEvents>(
        resources.ready_event_handles, resources.consumed_event_handles, resources.ring_slots,
        [device] { return consumer::CurrentCudaStream(device); });
    consumer::RingEvents* events = events_.get();
    options.record_consumed = [events](uint32_t slot) { events->RecordConsumed(slot); };
    options.before_switch = [events] { events->RefuseCapture("a streamed ddo::nn::Linear"); };
  }
  consumer_ = std::make_unique<consumer::RingConsumer>(std::move(options));
  units_ = std::make_shared<ConsumerUnits>(consumer_.get(), views_.get());
}

void StreamingSession::Impl::Patch(const std::map<std::string, StreamedAt>& streamed) {
  std::set<nn::LinearImpl*> done;
  for (const auto& [name, group] : groups_) {
    auto where = streamed.find(name);
    if (where == streamed.end()) continue;
    for (const ModuleTensor& entry : group) {
      auto* linear = dynamic_cast<nn::LinearImpl*>(entry.owner);
      if (linear == nullptr || !done.insert(linear).second) continue;
      linear->tap_ = std::make_shared<detail::StreamTap>(units_, where->second.unit,
                                                         where->second.index, entry.module_path);
      patched_.push_back(linear);
    }
  }
}

void StreamingSession::Impl::BeginForward() {
  if (closed_) {
    throw SessionClosedError(StatusCode::kFailedPrecondition, "the streaming session is closed");
  }
  if (consumer_ == nullptr) return;
  if (events_ != nullptr) events_->RefuseCapture("the streamed module");
  consumer_->BeginForward();
}

void StreamingSession::Impl::EndForward() {
  if (consumer_ == nullptr) return;
  std::vector<uint32_t> order = consumer_->EndForward();
  if (order.empty()) return;
  const uint32_t accepted = ValueOrThrow(rpc_->set_schedule(answer_.session_id, order));
  consumer_->AdoptSchedule(std::move(order), accepted);
}

StreamStats StreamingSession::Impl::Stats() const {
  StreamStats stats;
  if (consumer_ != nullptr) {
    const consumer::ConsumerStatistics& counters = consumer_->statistics();
    stats.uses = counters.uses;
    stats.streamed_uses = counters.streamed_uses;
    stats.sync_uses = counters.sync_uses;
    stats.skipped_uses = counters.skipped_uses;
    stats.bytes_used = counters.bytes_used;
    stats.wait_seconds = counters.wait_seconds();
    stats.overhead_us_per_unit = counters.overhead_us_per_unit();
  }
  if (answer_.device) {
    stats.units = static_cast<uint32_t>(answer_.device->units.size());
    stats.ring_slots = answer_.device->ring_slots;
    stats.resident_bytes = answer_.device->resident_slab_bytes;
    stats.ring_bytes = answer_.device->units.empty()
                           ? 0 : answer_.device->ring_arena_bytes + answer_.device->ring_slot_bytes;
  }
  return stats;
}

void StreamingSession::Impl::WaitForDevice() noexcept {
  if (!device_.is_cuda()) return;
  try {
    // Every read of the ring and slab was queued on the current stream (the consumed events
    // were recorded there).
    c10::impl::getDeviceGuardImpl(c10::kCUDA)->getStream(device_).synchronize();
  } catch (...) {  // a failed device: nothing more to wait for
  }
}

void StreamingSession::Impl::RestoreHostTensors() noexcept {
  for (nn::LinearImpl* linear : patched_) linear->tap_.reset();
  patched_.clear();
  if (!bound_) return;
  for (const auto& [name, group] : groups_) {
    auto view = pool_views_.find(name);
    if (view != pool_views_.end()) detail::Rebind(group, view->second);
  }
  bound_ = false;
}

void StreamingSession::Impl::Close() noexcept {
  if (closed_) return;
  closed_ = true;
  if (consumer_ != nullptr) {
    try {
      consumer_->Release();
    } catch (...) {  // ddod gone or the session failed: nothing waits for the release
      consumer_->ForgetHeld();
    }
  }
  if (units_ != nullptr) units_->Close();
  WaitForDevice();
  RestoreHostTensors();
  views_.reset();
  consumer_.reset();
  events_.reset();
  doorbell_mapping_.reset();
  block_mapping_.reset();
  ring_.reset();
  slab_.reset();
  groups_.clear();
  // NOT_FOUND, UNAVAILABLE, CANCELLED: the session or ddod is gone already.
  (void)rpc_->detach(answer_.session_id);
}

StreamingSession::StreamingSession(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
StreamingSession::~StreamingSession() { close(); }
void StreamingSession::begin_forward() { impl_->BeginForward(); }
void StreamingSession::end_forward() { impl_->EndForward(); }
void StreamingSession::close() { impl_->Close(); }
bool StreamingSession::closed() const { return impl_->closed(); }
const std::string& StreamingSession::session_id() const { return impl_->answer().session_id; }
const std::string& StreamingSession::cache_key() const {
  return impl_->answer().component.cache_key;
}
torch::Device StreamingSession::device() const { return impl_->device(); }
std::vector<uint32_t> StreamingSession::schedule() const { return impl_->Schedule(); }
StreamStats StreamingSession::stats() const { return impl_->Stats(); }

std::string StreamingSession::plan() const {
  const PlanExplanation& plan = impl_->answer().plan;
  std::string text = "route " + plan.route + ": " + std::to_string(plan.resident_bytes) +
                     " bytes resident, " + std::to_string(plan.streamed_bytes) +
                     " bytes streamed through " + std::to_string(plan.ring_slots) + " slots";
  for (const PlanDecision& decision : plan.decisions) {
    text += "\n  " + decision.key + " = " + decision.value + ": " + decision.reason;
  }
  return text;
}

std::unique_ptr<StreamingSession> stream(Client& client, torch::nn::Module& module,
                                         const std::string& cache_key, torch::Device device,
                                         const StreamSettings& settings) {
  if (cache_key.empty()) {
    throw Error(StatusCode::kInvalidArgument, "cache_key must be a non-empty string");
  }
  if (!(settings.stall_timeout_s > 0)) {
    throw Error(StatusCode::kInvalidArgument, "stall_timeout_s must be positive");
  }
  if (settings.strict) RefusePlainLinears(module);
  ResolvedDevice resolved = ResolveDevice(device);
  std::vector<std::string> streamable = StreamableNames(
      detail::AliasGroups(detail::ModuleTensors(module)), settings.keep_resident);
  AttachAnswer answer = ValueOrThrow(
      client.rpc().attach(cache_key, resolved.uuid, settings.settings, streamable));
  auto impl = std::make_unique<StreamingSession::Impl>(client.shared_rpc(), module,
                                                       std::move(answer), resolved, settings);
  std::unique_ptr<StreamingSession> session(new StreamingSession(std::move(impl)));
  session->impl_->Open();  // a failure closes the session (its destructor) and detaches
  return session;
}

}  // namespace ddo
