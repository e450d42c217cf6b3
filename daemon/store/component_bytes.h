// File: daemon/store/component_bytes.h
//
// Where a component's tensor bytes are: the pool segments it uses, its own first (index 0),
// then those a derived version shares with its base. A TensorEntry's `segment` indexes this
// list. Holding a ComponentBytes keeps every segment (so every byte) alive; readers go
// through DataOf instead of computing addresses themselves. A file-tier component has no
// segment: its bytes are in its backing files (backing_files.h), which a ComponentBytes keeps
// open, and a reader copies them into a buffer of its own with ReadTensor or ReadRanges. A
// split component has both: some tensors in its own segment, the others (InFile) in files.
//
// Thread-safety: immutable after construction; copies may be used from any thread. The bytes
// themselves are read-only once the component is READY.
#ifndef DDO_DAEMON_STORE_COMPONENT_BYTES_H_
#define DDO_DAEMON_STORE_COMPONENT_BYTES_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "daemon/common/file_system.h"
#include "daemon/common/work_progress.h"
#include "daemon/layout/file_layout.h"
#include "daemon/layout/tensor_table.h"
#include "daemon/pool/host_pool.h"
#include "daemon/store/backing_files.h"

namespace ddo {

class ComponentBytes {
 public:
  ComponentBytes() = default;
  explicit ComponentBytes(std::vector<std::shared_ptr<PoolSegment>> segments)
      : segments_(std::move(segments)) {}
  // A file-tier component's bytes: no segment, only its files.
  explicit ComponentBytes(std::shared_ptr<const BackingFiles> files) : files_(std::move(files)) {}
  // A split component's: the tensors `in_file` marks (by table index) are read from `files`,
  // the others lie in `segments`.
  ComponentBytes(std::vector<std::shared_ptr<PoolSegment>> segments,
                 std::shared_ptr<const BackingFiles> files,
                 std::shared_ptr<const std::vector<bool>> in_file)
      : segments_(std::move(segments)), files_(std::move(files)), in_file_(std::move(in_file)) {}

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

  // The backing files of a file-tier component; null for a pool component.
  const BackingFiles* files() const { return files_.get(); }
  // Whether the tensor at `index` of the table lies in a file (DataOf must not be used).
  bool InFile(size_t index) const {
    return files_ != nullptr && index < files_->ranges().size() &&
           (in_file_ == nullptr || (*in_file_)[index]);
  }
  // Copies the bytes of the table's tensor `index` (which must lie in a file) into `dst`
  // (its byte_size): DataLoss when the file shrank, a read error naming the file;
  // FailedPrecondition when it is not in a file. Reads go through `fs` (nullptr: the default).
  absl::Status ReadTensor(size_t index, char* dst, FileSystem* fs = nullptr) const;
  // Copies `ranges` (of the backing files, e.g. a unit's CoalesceRanges) into `dst` one after
  // the other, each range's bytes right after the previous one's; errors as ReadTensor.
  absl::Status ReadRanges(const std::vector<FileRange>& ranges, char* dst,
                          FileSystem* fs = nullptr) const;

 private:
  std::vector<std::shared_ptr<PoolSegment>> segments_;
  std::shared_ptr<const BackingFiles> files_;
  std::shared_ptr<const std::vector<bool>> in_file_;  // null: every tensor (with files_)
};

// "xxh3-64:<16 hex>" of the bytes of the tensors in the component's own segment (segment 0),
// in table order: the content hash of a component that is not derived (all its tensors), and
// of a derived version's changed tensors. `progress` (optional) counts the bytes hashed.
std::string OwnContentHash(const std::vector<TensorEntry>& tensors, const ComponentBytes& bytes,
                           WorkProgress* progress = nullptr);

}  // namespace ddo

#endif  // DDO_DAEMON_STORE_COMPONENT_BYTES_H_
