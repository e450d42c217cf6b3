// File: daemon/layout/tensor_table.h
//
// A component's tensor table: what each tensor is, which streaming unit it belongs to and
// where it lives in the component's segment. The layout puts units contiguously, in the order
// of their first appearance, so that one unit is one DMA; within a unit tensors keep their
// order. Units start on 4 KiB boundaries and tensors on 256-byte boundaries (aligned for any
// dtype and for vectorised copies).
//
// Thread-safety: TensorEntry is a value; the functions are pure (LayOut changes only the table it
// is given); a ContentHasher is one caller's.
#ifndef DDO_DAEMON_LAYOUT_TENSOR_TABLE_H_
#define DDO_DAEMON_LAYOUT_TENSOR_TABLE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "daemon/common/xxh3_hasher.h"
#include "daemon/layout/dtype.h"

namespace ddo {

struct TensorEntry {
  std::string name;
  DType dtype = DType::kU8;
  std::vector<int64_t> shape;
  uint64_t byte_size = 0;
  std::string module_path;
  std::string module_class;
  uint32_t unit = 0;
  bool is_buffer = false;
  // Offset in the component's segment (assigned by LayOut).
  uint64_t offset = 0;
  // Which of the component's segments holds the bytes: 0, its own, for every tensor of a
  // component that is not derived; a derived version's unchanged tensors lie in segments it
  // shares with its base (component_bytes.h).
  uint32_t segment = 0;
};

inline constexpr uint64_t kUnitAlignment = 4096;
// No component is larger (1 PiB): keeps every offset computation far from overflow.
inline constexpr uint64_t kMaxComponentBytes = 1ull << 50;
inline constexpr uint64_t kTensorAlignment = 256;

// Validates a table from a request (service/tensor_proto.h converts it): not empty, names
// non-empty and unique, dimensions non-negative, byte_size == product(shape) * dtype size, the
// total at most kMaxComponentBytes. InvalidArgument names the tensor. Offsets and segments
// are not looked at (LayOut assigns them).
absl::Status ValidateTensorTable(const std::vector<TensorEntry>& tensors);

// Assigns offsets (see the file comment) and returns the bytes the layout spans.
uint64_t LayOut(std::vector<TensorEntry>& tensors);

// LayOut, except that a tensor of at most `grid` bytes that would cross a multiple of `grid`
// starts at that multiple instead (0: no grid): for a segment pinned in parts of `grid` bytes
// ahead of the layout (the pre-pinned reserve), since a copy must stay within one part.
uint64_t LayOutOnGrid(std::vector<TensorEntry>& tensors, uint64_t grid);

// Sum of byte sizes.
uint64_t TotalTensorBytes(const std::vector<TensorEntry>& tensors);

// Number of distinct units.
uint32_t CountUnits(const std::vector<TensorEntry>& tensors);

// "xxh3-64:<16 hex>" of names, dtypes, shapes and units, in table order.
std::string StructureHash(const std::vector<TensorEntry>& tensors);

// "xxh3-64:<16 hex>" of the tensors' bytes, read from `base + offset`, in table order.
std::string ContentHash(const std::vector<TensorEntry>& tensors, const char* base);

// ContentHash in pieces, for bytes that are not in memory at once: Update with each tensor's
// bytes in table order (any split of them), then Digest.
class ContentHasher {
 public:
  void Update(const void* data, size_t size) { hasher_.Update(data, size); }
  std::string Digest() const;

 private:
  Xxh3Hasher hasher_;
};

}  // namespace ddo

#endif  // DDO_DAEMON_LAYOUT_TENSOR_TABLE_H_
