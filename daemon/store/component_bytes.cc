// File: daemon/store/component_bytes.cc
#include "daemon/store/component_bytes.h"

namespace ddo {

const std::shared_ptr<PoolSegment>& ComponentBytes::own() const {
  static const std::shared_ptr<PoolSegment> kNone;
  return segments_.empty() ? kNone : segments_.front();
}

bool ComponentBytes::AllPinned() const {
  for (const auto& segment : segments_) {
    if (segment == nullptr || !segment->pinned()) return false;
  }
  return !segments_.empty();
}

std::string OwnContentHash(const std::vector<TensorEntry>& tensors, const ComponentBytes& bytes) {
  ContentHasher hasher;
  for (const TensorEntry& tensor : tensors) {
    if (tensor.segment == 0) hasher.Update(bytes.DataOf(tensor), tensor.byte_size);
  }
  return hasher.Digest();
}

}  // namespace ddo
