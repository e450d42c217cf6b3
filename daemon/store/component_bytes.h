// File: daemon/store/component_bytes.h
//
// Where a component's tensor bytes are: the pool segments it uses, its own first (index 0),
// then those a derived version shares with its base. A TensorEntry's `segment` indexes this
// list. Holding a ComponentBytes keeps every segment (so every byte) alive; readers go
// through DataOf instead of computing addresses themselves.
//
// Thread-safety: immutable after construction; copies may be used from any thread. The bytes
// themselves are read-only once the component is READY.
#ifndef DDO_DAEMON_STORE_COMPONENT_BYTES_H_
#define DDO_DAEMON_STORE_COMPONENT_BYTES_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "daemon/common/work_progress.h"
#include "daemon/pool/host_pool.h"
#include "daemon/layout/tensor_table.h"

namespace ddo {

class ComponentBytes {
 public:
  ComponentBytes() = default;
  explicit ComponentBytes(std::vector<std::shared_ptr<PoolSegment>> segments)
      : segments_(std::move(segments)) {}

  // The first byte of `tensor` (its segment index must be valid: the store checks tables).
  const char* DataOf(const TensorEntry& tensor) const {
    return segments_[tensor.segment]->data() + tensor.offset;
  }
  // The segment the component allocated itself (where an upload writes); null when empty.
  const std::shared_ptr<PoolSegment>& own() const;
  const std::vector<std::shared_ptr<PoolSegment>>& segments() const { return segments_; }
  bool empty() const { return segments_.empty(); }
  // Whether every segment is page-locked.
  bool AllPinned() const;

 private:
  std::vector<std::shared_ptr<PoolSegment>> segments_;
};

// "xxh3-64:<16 hex>" of the bytes of the tensors in the component's own segment (segment 0),
// in table order: the content hash of a component that is not derived (all its tensors), and
// of a derived version's changed tensors. `progress` (optional) counts the bytes hashed.
std::string OwnContentHash(const std::vector<TensorEntry>& tensors, const ComponentBytes& bytes,
                           WorkProgress* progress = nullptr);

}  // namespace ddo

#endif  // DDO_DAEMON_STORE_COMPONENT_BYTES_H_
