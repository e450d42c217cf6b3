#include "daemon/service/component_proto.h"

namespace ddo {

void ToProto(const ComponentSnapshot& snapshot, ddo::v1::ComponentRef* ref) {
  ref->set_component_id(snapshot.component_id);
  ref->set_cache_key(snapshot.cache_key);
  ref->set_structure_hash(snapshot.structure_hash);
  ref->set_total_bytes(snapshot.total_bytes);
  ref->set_content_hash(snapshot.content_hash);
}

void ToProto(const ComponentSnapshot& snapshot, bool with_layout, ddo::v1::ComponentInfo* info) {
  ToProto(snapshot, info->mutable_ref());
  info->set_state(snapshot.state == ComponentState::kReady ? ddo::v1::COMPONENT_STATE_READY
                                                           : ddo::v1::COMPONENT_STATE_UPLOADING);
  info->set_tensor_count(static_cast<uint32_t>(snapshot.tensors.size()));
  info->set_unit_count(snapshot.unit_count);
  info->set_pinned(snapshot.pinned);
  info->set_pinned_bytes(snapshot.pinned ? snapshot.segment_size : 0);
  info->set_sessions(snapshot.sessions);
  info->set_last_used_unix_ms(absl::ToUnixMillis(snapshot.last_used));
  if (!with_layout) {
    return;
  }
  auto* segment = info->add_segments();
  segment->set_shm_name(snapshot.segment_name);
  segment->set_size_bytes(snapshot.segment_size);
  for (const TensorEntry& tensor : snapshot.tensors) {
    auto* placement = info->add_placements();
    placement->set_name(tensor.name);
    placement->set_segment(0);
    placement->set_offset(tensor.offset);
    placement->set_byte_size(tensor.byte_size);
    ToProto(tensor, info->add_tensors());
  }
}

}  // namespace ddo
