// The reserve's rule, shared by both systems; descriptor_limit_posix.cc and
// descriptor_limit_windows.cc read the process's limit and count.
#include "daemon/common/descriptor_reserve.h"

#include <algorithm>
#include <utility>

namespace ddo {

DescriptorReserve::DescriptorReserve(size_t limit, size_t reserve, Counter count)
    : limit_(limit), reserve_(std::min(reserve, limit / 2)), count_(std::move(count)) {}

bool DescriptorReserve::Exhausted(int newest_fd) const {
  const size_t usable = limit_ - reserve_;
  if (newest_fd >= 0 && static_cast<size_t>(newest_fd) + 1 > usable) return true;
  absl::StatusOr<size_t> open = count_();
  return !open.ok() || *open > usable;
}

}  // namespace ddo
