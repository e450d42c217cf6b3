// File: client-cpp/src/consumer/ring_views.h
//
// Zero-copy views of units placed anywhere in the ring: the port of RingViews in
// py/ring_consumer.py. A view is one as_strided on the ring reinterpreted as the tensor's
// dtype; placements recur (ddod lays every cycle out alike, docs/streaming.md §4), so views are
// cached per (unit, offset): per unit a short vector searched linearly (one to a few places
// per unit), cleared as a whole once it holds `max_cached` placements.
//
// Thread-safety: none; used by the one runner thread of a session.
#ifndef DDO_CLIENT_CONSUMER_RING_VIEWS_H_
#define DDO_CLIENT_CONSUMER_RING_VIEWS_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace ddo::consumer {

// Where one tensor of a unit lies inside the unit (the Attach answer's UnitLayout, with the
// dtype and shape of its TensorSpec).
struct TensorPlacement {
  std::string name;
  uint64_t offset = 0;     // bytes from the unit's start
  uint64_t byte_size = 0;
  at::ScalarType dtype = at::kByte;
  std::vector<int64_t> shape;
};
using UnitLayout = std::vector<TensorPlacement>;
// A unit's tensors where they lie in the ring, in the order of its UnitLayout.
using UnitViews = std::vector<at::Tensor>;

// The ring's memory as one uint8 tensor on `device`, without a copy. Pass the device
// explicitly (torch then does not query the pointer's device). `release` runs when the last
// tensor over the memory is gone; it must not unmap device memory ddod may still free first
// (the session closes the mapping itself, after dropping every view).
at::Tensor RingTensor(void* data, uint64_t bytes, at::Device device,
                      std::function<void(void*)> release);

class RingViews {
 public:
  // ddod places units, and tensors inside units, at multiples of this (docs/streaming.md).
  static constexpr uint64_t kAlignment = 256;

  // `ring`: the whole ring as one contiguous uint8 tensor. StreamingError when a tensor's
  // offset is not a multiple of its element size.
  RingViews(at::Tensor ring, const std::vector<UnitLayout>& layouts, size_t max_cached = 8192);

  RingViews(const RingViews&) = delete;
  RingViews& operator=(const RingViews&) = delete;

  uint32_t unit_count() const { return static_cast<uint32_t>(units_.size()); }
  // The bytes `unit` occupies in the ring.
  uint64_t span(uint32_t unit) const { return units_[unit].span; }
  // Every unit's span (RingConsumerOptions::unit_spans).
  std::vector<uint64_t> spans() const;

  // The views of `unit`'s tensors with the unit at `offset` in the ring. StreamingError when
  // the placement is not 256-aligned or not inside the ring. The reference stays valid until
  // the next call or Close().
  const UnitViews& Views(uint32_t unit, uint64_t offset);
  // The placements cached now.
  size_t cached() const { return cached_; }

  // Forgets the ring and every view of it (before its memory is closed).
  void Close();

 private:
  struct Part {
    at::Tensor typed;  // the ring as the tensor's dtype
    std::vector<int64_t> shape;
    std::vector<int64_t> strides;
    int64_t itemsize = 1;
    int64_t first = 0;  // the tensor's offset in the unit, in elements
  };
  struct Cached {
    uint64_t offset = 0;
    std::unique_ptr<UnitViews> views;  // heap: stable while the per-unit vector grows
  };
  struct Unit {
    uint64_t span = 0;
    std::vector<Part> parts;
    std::vector<Cached> cache;
  };

  const UnitViews& Make(Unit& unit, uint32_t index, uint64_t offset);

  uint64_t size_ = 0;
  std::vector<Unit> units_;
  size_t cached_ = 0;
  size_t max_cached_;
};

}  // namespace ddo::consumer

#endif  // DDO_CLIENT_CONSUMER_RING_VIEWS_H_
