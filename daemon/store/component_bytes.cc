// File: daemon/store/component_bytes.cc
#include "daemon/store/component_bytes.h"

#include <algorithm>

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

std::string OwnContentHash(const std::vector<TensorEntry>& tensors, const ComponentBytes& bytes,
                           WorkProgress* progress) {
  // In steps, so that a reporter sees a big tensor's bytes go by.
  constexpr uint64_t kStep = 64ull << 20;
  ContentHasher hasher;
  for (const TensorEntry& tensor : tensors) {
    if (tensor.segment != 0) continue;
    const char* data = bytes.DataOf(tensor);
    for (uint64_t done = 0; done < tensor.byte_size; done += kStep) {
      const uint64_t step = std::min(kStep, tensor.byte_size - done);
      hasher.Update(data + done, step);
      if (progress != nullptr) progress->Add(step);
    }
  }
  return hasher.Digest();
}

}  // namespace ddo
