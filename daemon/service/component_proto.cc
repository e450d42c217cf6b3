#include "daemon/service/component_proto.h"

#include <algorithm>

#include "daemon/service/tensor_proto.h"
#include "daemon/store/upload_pipes.h"

namespace ddo {
namespace {

void AddPlacement(const TensorEntry& tensor, uint32_t segment,
                  ddo::v1::TensorPlacement* placement) {
  placement->set_name(tensor.name);
  placement->set_segment(segment);
  placement->set_offset(tensor.offset);
  placement->set_byte_size(tensor.byte_size);
}

// A file-tier or split component's layout: its pool segments (a split one's), then a
// SEGMENT_KIND_FILE segment per backing file; each tensor placed in its segment, or at its
// offset in its file (the client maps the files copy-on-write).
void FileLayoutToProto(const ComponentSnapshot& snapshot, ddo::v1::ComponentInfo* info) {
  const BackingFiles& files = *snapshot.files;
  for (const ComponentSnapshot::Segment& used : snapshot.segments) {
    auto* segment = info->add_segments();
    segment->set_shm_name(used.name);
    segment->set_size_bytes(used.size);
    segment->set_kind(ddo::v1::SEGMENT_KIND_SHM);
  }
  const auto first_file = static_cast<uint32_t>(snapshot.segments.size());
  for (size_t index = 0; index < files.files().size(); ++index) {
    auto* segment = info->add_segments();
    segment->set_shm_name(BackingFileSegmentName(snapshot.component_id, index));
    segment->set_size_bytes(files.files()[index].size);
    segment->set_kind(ddo::v1::SEGMENT_KIND_FILE);
    segment->set_file_size(files.files()[index].size);
  }
  for (size_t index = 0; index < snapshot.tensors.size(); ++index) {
    const TensorEntry& tensor = snapshot.tensors[index];
    if (snapshot.in_file != nullptr && !(*snapshot.in_file)[index]) {
      AddPlacement(tensor, tensor.segment, info->add_placements());
    } else {
      TensorEntry placed = tensor;
      const FileRange& range = files.ranges()[index];
      placed.offset = range.offset;
      AddPlacement(placed, first_file + range.file, info->add_placements());
    }
    ToProto(tensor, info->add_tensors());
  }
}

}  // namespace

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
  info->set_keep_alive_seconds(snapshot.keep_alive == absl::InfiniteDuration()
                                   ? -1
                                   : absl::ToInt64Seconds(snapshot.keep_alive));
  info->set_base_cache_key(snapshot.base_cache_key);
  info->set_changed_tensors(snapshot.changed_tensors);
  info->set_own_bytes(snapshot.own_bytes);
  info->set_tier(snapshot.tier == ComponentTier::kFile    ? ddo::v1::COMPONENT_TIER_FILE
                 : snapshot.tier == ComponentTier::kSplit ? ddo::v1::COMPONENT_TIER_SPLIT
                                                          : ddo::v1::COMPONENT_TIER_POOL);
  info->set_pool_bytes(snapshot.pool_bytes);
  info->set_file_bytes(snapshot.file_bytes);
  if (!with_layout) {
    return;
  }
  if (snapshot.files != nullptr) {
    FileLayoutToProto(snapshot, info);
    return;
  }
  for (const ComponentSnapshot::Segment& used : snapshot.segments) {
    auto* segment = info->add_segments();
    segment->set_shm_name(used.name);
    segment->set_size_bytes(used.size);
    segment->set_kind(ddo::v1::SEGMENT_KIND_SHM);
  }
  for (const TensorEntry& tensor : snapshot.tensors) {
    AddPlacement(tensor, tensor.segment, info->add_placements());
    ToProto(tensor, info->add_tensors());
  }
}

void UploadLayoutToProto(const ComponentSnapshot& snapshot,
                         ddo::v1::RegisterComponentResponse* response) {
  auto* segment = response->add_segments();
  segment->set_shm_name(snapshot.segment_name);
  segment->set_size_bytes(snapshot.segment_size);
  for (const TensorEntry& tensor : snapshot.tensors) {
    if (tensor.segment == 0) AddPlacement(tensor, 0, response->add_placements());
  }
}

void StreamedUploadToProto(const ComponentSnapshot& snapshot,
                           const std::vector<SegmentGrant>& grants,
                           ddo::v1::RegisterComponentResponse* response) {
  const std::vector<int> streams = AssignStreams(snapshot.tensors, static_cast<int>(grants.size()));
  for (size_t i = 0; i < snapshot.tensors.size(); ++i) {
    const TensorEntry& tensor = snapshot.tensors[i];
    if (tensor.segment != 0) continue;
    ddo::v1::TensorPlacement* placement = response->add_placements();
    AddPlacement(tensor, 0, placement);
    placement->set_stream(static_cast<uint32_t>(std::max(streams[i], 0)));
  }
  for (const SegmentGrant& grant : grants) response->add_stream_names(grant.shm_name);
}

}  // namespace ddo
