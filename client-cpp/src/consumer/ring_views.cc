// File: client-cpp/src/consumer/ring_views.cc
#include "client-cpp/src/consumer/ring_views.h"

#include <algorithm>
#include <map>
#include <utility>

#include "ddo/status.h"

namespace ddo::consumer {

at::Tensor RingTensor(void* data, uint64_t bytes, at::Device device,
                      std::function<void(void*)> release) {
  return at::from_blob(data, {static_cast<int64_t>(bytes)}, std::move(release),
                       at::TensorOptions().dtype(at::kByte).device(device));
}

RingViews::RingViews(at::Tensor ring, const std::vector<UnitLayout>& layouts, size_t max_cached)
    : size_(static_cast<uint64_t>(ring.numel())), max_cached_(max_cached) {
  if (ring.scalar_type() != at::kByte || ring.dim() != 1 || !ring.is_contiguous()) {
    throw Error(StatusCode::kInvalidArgument, "the ring must be one contiguous uint8 tensor");
  }
  std::map<at::ScalarType, at::Tensor> typed;
  units_.reserve(layouts.size());
  for (const UnitLayout& tensors : layouts) {
    Unit unit;
    for (const TensorPlacement& tensor : tensors) {
      const int64_t itemsize = static_cast<int64_t>(c10::elementSize(tensor.dtype));
      if (tensor.offset % itemsize != 0 || kAlignment % itemsize != 0) {
        throw StreamingError(StatusCode::kInvalidArgument,
                             "'" + tensor.name + "' lies at offset " +
                                 std::to_string(tensor.offset) +
                                 " of its unit, not aligned to its " + std::to_string(itemsize) +
                                 "-byte elements");
      }
      auto found = typed.find(tensor.dtype);
      if (found == typed.end()) {
        const int64_t whole = static_cast<int64_t>(size_ - size_ % itemsize);
        found = typed.emplace(tensor.dtype, ring.narrow(0, 0, whole).view(tensor.dtype)).first;
      }
      Part part;
      part.typed = found->second;
      part.shape = tensor.shape;
      part.strides.assign(tensor.shape.size(), 1);
      int64_t stride = 1;
      for (size_t dim = tensor.shape.size(); dim-- > 0;) {
        part.strides[dim] = stride;
        stride *= std::max<int64_t>(tensor.shape[dim], 1);
      }
      part.itemsize = itemsize;
      // as_strided's offset counts from the storage's start, the ring's from its own.
      part.first = part.typed.storage_offset() + static_cast<int64_t>(tensor.offset) / itemsize;
      unit.parts.push_back(std::move(part));
      unit.span = std::max(unit.span, tensor.offset + tensor.byte_size);
    }
    units_.push_back(std::move(unit));
  }
}

std::vector<uint64_t> RingViews::spans() const {
  std::vector<uint64_t> spans;
  spans.reserve(units_.size());
  for (const Unit& unit : units_) spans.push_back(unit.span);
  return spans;
}

const UnitViews& RingViews::Views(uint32_t unit, uint64_t offset) {
  Unit& entry = units_.at(unit);
  for (const Cached& cached : entry.cache) {
    if (cached.offset == offset) return *cached.views;
  }
  return Make(entry, unit, offset);
}

const UnitViews& RingViews::Make(Unit& unit, uint32_t index, uint64_t offset) {
  if (offset % kAlignment != 0 || offset > size_ || unit.span > size_ - offset) {
    throw StreamingError(StatusCode::kDataLoss,
                         "ddod placed unit " + std::to_string(index) + " at bytes [" +
                             std::to_string(offset) + ", " + std::to_string(offset + unit.span) +
                             ") of a " + std::to_string(size_) +
                             "-byte ring (units lie at multiples of " +
                             std::to_string(kAlignment) + " bytes)");
  }
  auto views = std::make_unique<UnitViews>();
  views->reserve(unit.parts.size());
  for (const Part& part : unit.parts) {
    const int64_t start = static_cast<int64_t>(offset) / part.itemsize + part.first;
    views->push_back(part.typed.as_strided(part.shape, part.strides, start));
  }
  if (cached_ >= max_cached_) {
    for (Unit& each : units_) each.cache.clear();
    cached_ = 0;
  }
  unit.cache.push_back(Cached{offset, std::move(views)});
  ++cached_;
  return *unit.cache.back().views;
}

void RingViews::Close() {
  units_.clear();
  cached_ = 0;
}

}  // namespace ddo::consumer
