// File: daemon/common/descriptor_reserve.h
//
// Descriptors are ddod's to spend on its own work (segments, passed files, CUDA, gRPC's own
// pipes) before they are callers' to hold as connections. ddod raises its soft RLIMIT_NOFILE
// to the hard limit at start, and the accept loops refuse a new connection while more than
// `limit - reserve` descriptors are open (docs/security.md §5): a flood of connections leaves
// `reserve` descriptors for the work of the callers already served.
//
// Thread-safety: a DescriptorReserve is immutable; Exhausted may be called from any thread.
#ifndef DDO_DAEMON_COMMON_DESCRIPTOR_RESERVE_H_
#define DDO_DAEMON_COMMON_DESCRIPTOR_RESERVE_H_

#include <cstddef>
#include <cstdint>
#include <functional>

#include "absl/status/statusor.h"

namespace ddo {

struct DescriptorLimit {
  uint64_t soft_before = 0;  // the soft limit ddod was started with
  uint64_t soft = 0;         // the soft limit now
  uint64_t hard = 0;
};

// Raises the soft RLIMIT_NOFILE to the hard limit and says what it was and is.
absl::StatusOr<DescriptorLimit> RaiseDescriptorLimit();

// The descriptors this process has open (the entries of /proc/self/fd, less the one that
// reads them). Fails when the directory cannot be opened, e.g. no descriptor is left.
absl::StatusOr<size_t> CountOpenDescriptors();

class DescriptorReserve {
 public:
  using Counter = std::function<absl::StatusOr<size_t>()>;

  // Of `limit` descriptors, keeps `reserve` for ddod's own work. A reserve over half the limit
  // is cut to half (use reserve()). `count` counts the open descriptors (tests inject one).
  DescriptorReserve(size_t limit, size_t reserve, Counter count = CountOpenDescriptors);

  // With the soft RLIMIT_NOFILE of this process as the limit.
  static DescriptorReserve ForThisProcess(size_t reserve);

  // Whether a connection that was just given descriptor `newest_fd` eats into the reserve.
  // The kernel hands out the lowest free number, so every number below `newest_fd` is open:
  // a number at or past the threshold settles it without counting; below it, the open
  // descriptors are counted. A count that fails says yes.
  bool Exhausted(int newest_fd) const;

  size_t limit() const { return limit_; }
  size_t reserve() const { return reserve_; }

 private:
  size_t limit_;
  size_t reserve_;
  Counter count_;
};

}  // namespace ddo

#endif  // DDO_DAEMON_COMMON_DESCRIPTOR_RESERVE_H_
