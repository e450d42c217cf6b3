// File: daemon/pool/range_pinner.cc
#include "daemon/pool/range_pinner.h"

#include <unistd.h>

#include <algorithm>
#include <numeric>
#include <utility>

namespace ddo {

std::vector<ByteRange> PinParts(const std::vector<ByteRange>& extents, uint64_t segment_size,
                                uint64_t target, std::vector<size_t>* part_of) {
  std::vector<size_t> order(extents.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return extents[a].offset < extents[b].offset; });
  if (part_of != nullptr) part_of->assign(extents.size(), 0);
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  std::vector<ByteRange> parts;
  uint64_t start = 0;
  for (size_t index : order) {
    const ByteRange& extent = extents[index];
    // A new part begins at this extent when the current one is big enough and the extent
    // starts a page: two registrations must never share a page (the second would fail), and
    // layouts start units, not every tensor, on page boundaries.
    if (extent.offset > start && extent.offset - start >= target && extent.offset % page == 0) {
      parts.push_back({start, extent.offset - start});
      start = extent.offset;
    }
    if (part_of != nullptr) (*part_of)[index] = parts.size();
  }
  if (segment_size > start || parts.empty()) {
    parts.push_back({start, segment_size - std::min(start, segment_size)});
  }
  return parts;
}

RangePinner::RangePinner(PoolSegment& segment, std::vector<ByteRange> parts,
                         std::vector<uint64_t> written_bytes)
    : segment_(segment), parts_(std::move(parts)), remaining_(std::move(written_bytes)) {
  remaining_.resize(parts_.size(), 0);
  if (!segment_.pool_pins()) return;
  for (size_t part = 0; part < parts_.size(); ++part) {
    if (remaining_[part] == 0) ready_.push_back(part);
  }
  outstanding_ = ready_.size();
  thread_ = std::thread([this] { Run(); });
}

RangePinner::~RangePinner() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void RangePinner::Written(size_t part, uint64_t bytes) {
  if (!thread_.joinable() || part >= parts_.size()) return;
  absl::MutexLock lock(&mu_);
  if (remaining_[part] == 0) return;
  remaining_[part] -= std::min(bytes, remaining_[part]);
  if (remaining_[part] == 0) {
    ready_.push_back(part);
    ++outstanding_;
  }
}

void RangePinner::WrittenRange(uint64_t offset, uint64_t bytes) {
  // The first part that ends after `offset` (parts are sorted and contiguous).
  auto part = std::upper_bound(parts_.begin(), parts_.end(), offset,
                               [](uint64_t at, const ByteRange& range) {
                                 return at < range.offset + range.bytes;
                               });
  const uint64_t end = offset + bytes;
  for (; part != parts_.end() && part->offset < end; ++part) {
    const uint64_t begin = std::max(offset, part->offset);
    const uint64_t stop = std::min(end, part->offset + part->bytes);
    if (stop > begin) Written(static_cast<size_t>(part - parts_.begin()), stop - begin);
  }
}

absl::Status RangePinner::Finish() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](size_t* outstanding) { return *outstanding == 0; }, &outstanding_));
  return error_;
}

void RangePinner::Run() {
  while (true) {
    size_t part;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](RangePinner* self) ABSL_NO_THREAD_SAFETY_ANALYSIS {
            return self->stopping_ || !self->ready_.empty();
          },
          this));
      if (stopping_) return;
      part = ready_.front();
      ready_.pop_front();
    }
    absl::Status pinned = segment_.PinRange(parts_[part].offset, parts_[part].bytes);
    absl::MutexLock lock(&mu_);
    if (!pinned.ok() && error_.ok()) error_ = std::move(pinned);
    --outstanding_;
  }
}

}  // namespace ddo
