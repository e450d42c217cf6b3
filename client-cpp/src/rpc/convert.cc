#include "convert.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"

namespace ddo {

// Beside the public overloads (not in an anonymous namespace), so that AllFromProto's
// unqualified FromProto finds them all.
static Segment FromProto(const ddo::v1::SharedSegment& segment) {
  return Segment{segment.shm_name(), segment.size_bytes(),
                 segment.kind() == ddo::v1::SEGMENT_KIND_FILE};
}

static Placement FromProto(const ddo::v1::TensorPlacement& placement) {
  return Placement{placement.name(), placement.segment(), placement.offset(),
                   placement.byte_size()};
}

namespace {

template <typename Out, typename Repeated>
std::vector<Out> AllFromProto(const Repeated& items) {
  std::vector<Out> result;
  result.reserve(static_cast<size_t>(items.size()));
  for (const auto& item : items) result.push_back(FromProto(item));
  return result;
}

// A 64-byte CUDA IPC handle; `present` false when ddod sent none (the host backend).
IpcHandle HandleFromBytes(const std::string& bytes, bool* present = nullptr) {
  IpcHandle handle{};
  std::memcpy(handle.data(), bytes.data(), std::min(bytes.size(), handle.size()));
  if (present != nullptr) *present = !bytes.empty();
  return handle;
}

// "BACKEND_CUDA" -> "cuda", "SETTING_SOURCE_ENVIRONMENT" -> "environment".
std::string ShortEnumName(const std::string& name, absl::string_view prefix) {
  return absl::AsciiStrToLower(absl::StartsWith(name, prefix) ? name.substr(prefix.size()) : name);
}

std::vector<SettingValue> ValuesFromProto(
    const google::protobuf::RepeatedPtrField<ddo::v1::SettingValue>& values) {
  std::vector<SettingValue> result;
  for (const ddo::v1::SettingValue& value : values) {
    result.push_back(SettingValue{
        value.name(), value.value(),
        ShortEnumName(ddo::v1::SettingSource_Name(value.source()), "SETTING_SOURCE_")});
  }
  return result;
}

}  // namespace

void ToProto(const TensorSpec& spec, ddo::v1::TensorSpec* out) {
  out->set_name(spec.name);
  out->set_dtype(static_cast<ddo::v1::DType>(spec.dtype));
  for (int64_t dimension : spec.shape) out->add_shape(dimension);
  out->set_byte_size(spec.byte_size);
  out->set_module_path(spec.module_path);
  out->set_module_class(spec.module_class);
  out->set_unit(spec.unit);
  out->set_is_buffer(spec.is_buffer);
}

TensorSpec FromProto(const ddo::v1::TensorSpec& spec) {
  TensorSpec result;
  result.name = spec.name();
  result.dtype = static_cast<DType>(spec.dtype());
  result.shape.assign(spec.shape().begin(), spec.shape().end());
  result.byte_size = spec.byte_size();
  result.module_path = spec.module_path();
  result.module_class = spec.module_class();
  result.unit = spec.unit();
  result.is_buffer = spec.is_buffer();
  return result;
}

ComponentInfo FromProto(const ddo::v1::ComponentRef& ref) {
  ComponentInfo result;
  result.component_id = ref.component_id();
  result.cache_key = ref.cache_key();
  result.structure_hash = ref.structure_hash();
  result.content_hash = ref.content_hash();
  result.total_bytes = ref.total_bytes();
  return result;
}

ComponentInfo FromProto(const ddo::v1::ComponentInfo& info) {
  ComponentInfo result = FromProto(info.ref());
  result.ready = info.state() == ddo::v1::COMPONENT_STATE_READY;
  result.tensor_count = info.tensor_count();
  result.unit_count = info.unit_count();
  result.pinned = info.pinned();
  result.pinned_bytes = info.pinned_bytes();
  result.sessions = info.sessions();
  result.last_used_unix_ms = info.last_used_unix_ms();
  result.base_cache_key = info.base_cache_key();
  result.own_bytes = info.own_bytes();
  result.keep_alive_seconds = info.keep_alive_seconds();
  result.owner_uid = info.owner_uid();
  result.segments = AllFromProto<Segment>(info.segments());
  result.placements = AllFromProto<Placement>(info.placements());
  result.tensors = AllFromProto<TensorSpec>(info.tensors());
  return result;
}

DaemonInfo FromProto(const ddo::v1::DaemonInfo& info) {
  DaemonInfo result;
  result.version = info.version();
  result.api_version = info.api_version();
  result.pid = info.pid();
  result.backend = ShortEnumName(ddo::v1::Backend_Name(info.backend()), "BACKEND_");
  result.backend_detail = info.backend_detail();
  for (const ddo::v1::DeviceInfo& device : info.devices()) {
    result.devices.push_back(DeviceInfo{device.uuid(), device.ordinal(), device.name(),
                                        device.total_bytes(), device.free_bytes(),
                                        device.compute_capability(),
                                        device.vram_budget_bytes()});
  }
  result.requested_preset = info.requested_preset();
  result.effective_preset = info.effective_preset();
  result.ram_budget_bytes = info.ram_budget_bytes();
  result.listen_addresses.assign(info.listen_addresses().begin(), info.listen_addresses().end());
  result.state_dir = info.state_dir();
  result.embedded = info.embedded();
  result.parent_pid = info.parent_pid();
  result.identity_socket = info.identity_socket();
  result.uid = info.uid();
  return result;
}

PlanExplanation FromProto(const ddo::v1::PlanExplanation& plan) {
  PlanExplanation result;
  result.route = plan.route();
  for (const ddo::v1::PlanDecision& decision : plan.decisions()) {
    result.decisions.push_back(PlanDecision{decision.key(), decision.value(), decision.reason()});
  }
  result.resident_bytes = plan.resident_bytes();
  result.streamed_bytes = plan.streamed_bytes();
  result.ring_slots = plan.ring_slots();
  result.group_offload_args.insert(plan.group_offload_args().begin(),
                                   plan.group_offload_args().end());
  return result;
}

DeviceResources FromProto(const ddo::v1::DeviceResources& device) {
  DeviceResources result;
  result.device_uuid = device.device_uuid();
  result.resident_slab_handle =
      HandleFromBytes(device.resident_slab_handle(), &result.has_resident_slab_handle);
  result.resident_slab_bytes = device.resident_slab_bytes();
  result.resident = AllFromProto<Placement>(device.resident());
  result.ring_handle = HandleFromBytes(device.ring_handle(), &result.has_ring_handle);
  result.ring_slots = device.ring_slots();
  result.ring_slot_bytes = device.ring_slot_bytes();
  result.ring_arena_bytes = device.ring_arena_bytes();
  for (const std::string& handle : device.ready_event_handles()) {
    result.ready_event_handles.push_back(HandleFromBytes(handle));
  }
  for (const std::string& handle : device.consumed_event_handles()) {
    result.consumed_event_handles.push_back(HandleFromBytes(handle));
  }
  result.control_block_shm = device.control_block_shm();
  result.control_block_bytes = device.control_block_bytes();
  result.doorbell_shm = device.doorbell_shm();
  result.resident_slab_shm = device.resident_slab_shm();
  result.ring_shm = device.ring_shm();
  for (const ddo::v1::UnitLayout& unit : device.units()) {
    result.units.push_back(UnitLayout{unit.unit(), unit.byte_size(), unit.resident(),
                                      AllFromProto<Placement>(unit.tensors()), unit.name()});
  }
  result.daemon_pid = device.daemon_pid();
  return result;
}

AttachAnswer FromProto(const ddo::v1::AttachResponse& response) {
  AttachAnswer result;
  result.session_id = response.session_id();
  result.component = FromProto(response.component());
  if (response.has_device()) result.device = FromProto(response.device());
  result.plan = FromProto(response.plan());
  result.schedule.assign(response.schedule().begin(), response.schedule().end());
  return result;
}

Upload FromProto(const ddo::v1::RegisterComponentResponse& response) {
  Upload result;
  result.warm_hit = response.warm_hit();
  result.upload_id = response.upload_id();
  result.component = FromProto(response.component());
  result.segments = AllFromProto<Segment>(response.segments());
  result.placements = AllFromProto<Placement>(response.placements());
  return result;
}

ResolvedSettings FromProto(const ddo::v1::ResolvedSettings& settings) {
  ResolvedSettings result;
  result.requested_preset = settings.requested_preset();
  result.effective_preset = settings.effective_preset();
  result.values = ValuesFromProto(settings.values());
  for (const ddo::v1::ComponentSettings& component : settings.components()) {
    result.components[component.component()] = ValuesFromProto(component.values());
  }
  return result;
}

}  // namespace ddo
