// File: daemon/service/stream_proto.cc
#include "daemon/service/stream_proto.h"

namespace ddo {
namespace {

void ToProto(const TensorEntry& tensor, uint64_t offset, ddo::v1::TensorPlacement* out) {
  out->set_name(tensor.name);
  out->set_offset(offset);
  out->set_byte_size(tensor.byte_size);
}

void ToProto(const DeviceExport& memory, ddo::v1::DeviceResources* out) {
  out->set_ring_handle(memory.ring_handle);
  out->set_ring_shm(memory.ring_shm);
  for (const std::string& handle : memory.ready_event_handles) {
    out->add_ready_event_handles(handle);
  }
  for (const std::string& handle : memory.consumed_event_handles) {
    out->add_consumed_event_handles(handle);
  }
  out->set_resident_slab_handle(memory.resident_slab_handle);
  out->set_resident_slab_shm(memory.resident_slab_shm);
}

}  // namespace

void ToProto(const SessionPlan& plan, ddo::v1::PlanExplanation* out) {
  out->set_route("ddo_stream");
  out->set_resident_bytes(plan.resident_bytes);
  out->set_streamed_bytes(plan.streamed_bytes);
  out->set_ring_slots(plan.ring_slots);
  for (const PlanDecisionEntry& entry : plan.decisions) ToProto(entry, out->add_decisions());
}

void ToProto(const PlanDecisionEntry& entry, ddo::v1::PlanDecision* out) {
  out->set_key(entry.key);
  out->set_value(entry.value);
  out->set_reason(entry.reason);
}

void ToProto(const PlanExplanation& plan, ddo::v1::PlanExplanation* out) {
  out->set_route(plan.route);
  for (const PlanDecisionEntry& entry : plan.decisions) ToProto(entry, out->add_decisions());
  out->set_resident_bytes(plan.resident_bytes);
  out->set_streamed_bytes(plan.streamed_bytes);
  out->set_ring_slots(plan.ring_slots);
  out->mutable_group_offload_args()->insert(plan.group_offload_args.begin(),
                                            plan.group_offload_args.end());
}

void ToProto(const OpenedStream& opened, int64_t daemon_pid, ddo::v1::AttachResponse* response) {
  const std::vector<TensorEntry>& tensors = opened.component.tensors;
  const SessionPlan& plan = opened.plan;
  ddo::v1::DeviceResources* resources = response->mutable_device();
  ToProto(opened.memory, resources);
  resources->set_device_uuid(opened.device);
  resources->set_resident_slab_bytes(plan.slab_bytes);
  for (const PlannedTensor& tensor : plan.resident) {
    ToProto(tensors[tensor.table_index], tensor.offset, resources->add_resident());
  }
  resources->set_ring_slots(plan.ring_slots);
  resources->set_ring_slot_bytes(plan.slot_bytes);
  resources->set_ring_arena_bytes(plan.arena_bytes);
  resources->set_control_block_shm(opened.control_block_shm);
  resources->set_control_block_bytes(opened.control_block_bytes);
  resources->set_doorbell_shm(opened.doorbell_shm);
  resources->set_daemon_pid(daemon_pid);
  for (uint32_t u = 0; u < plan.units.size(); ++u) {
    const StreamUnit& unit = plan.units[u];
    auto* out = resources->add_units();
    out->set_unit(u);
    out->set_name(unit.name);
    out->set_byte_size(unit.span_bytes);
    for (const PlannedTensor& tensor : unit.tensors) {
      ToProto(tensors[tensor.table_index], tensor.offset, out->add_tensors());
    }
  }
  ToProto(plan, response->mutable_plan());
  for (uint32_t unit : opened.schedule) response->add_schedule(unit);
  response->set_session_id(opened.session_id);
}

}  // namespace ddo
