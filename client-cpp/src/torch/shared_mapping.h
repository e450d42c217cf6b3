// File: client-cpp/src/torch/shared_mapping.h
//
// One mmap of a ddod segment, unmapped when the last holder lets go. Tensors made over it hold
// a shared_ptr to it (their from_blob deleter), so a view outlives the session that made it, as
// a Python mapping does.
//
// Thread-safety: immutable after Map; the mapping may be read from any thread (writes: as the
// mode and its users agree), and the last shared_ptr holder unmaps it, on whichever thread.
#ifndef DDO_CLIENT_TORCH_SHARED_MAPPING_H_
#define DDO_CLIENT_TORCH_SHARED_MAPPING_H_

#include <cstdint>
#include <memory>
#include <string>

#include "ddo/status.h"

namespace ddo::detail {

enum class MapMode {
  kCopyOnWrite,     // MAP_PRIVATE, read-write: a write stays in this process (pool, slab)
  kSharedReadOnly,  // MAP_SHARED, read-only: ddod's later writes show (the ring)
  kSharedWritable,  // MAP_SHARED, read-write (control block, doorbell)
};

class SharedMapping {
 public:
  // Maps `size` bytes of `fd` (not taken over). FAILED_PRECONDITION when the segment is smaller
  // than `size` (ddod's answer and its segment disagree), or mmap fails; `name` is for messages.
  static StatusOr<std::shared_ptr<SharedMapping>> Map(int fd, uint64_t size, MapMode mode,
                                                      const std::string& name);
  ~SharedMapping();
  SharedMapping(const SharedMapping&) = delete;
  SharedMapping& operator=(const SharedMapping&) = delete;

  uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }

 private:
  SharedMapping(uint8_t* data, uint64_t size) : data_(data), size_(size) {}
  uint8_t* data_;
  uint64_t size_;
};

}  // namespace ddo::detail

#endif  // DDO_CLIENT_TORCH_SHARED_MAPPING_H_
