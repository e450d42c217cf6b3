// File: proto/wire/src/os/segment_name.h
//
// What both implementations of ddo/os/shared_memory.h check before they create a segment.
//
// Thread-safety: a pure function.
#ifndef DDO_OS_SEGMENT_NAME_H_
#define DDO_OS_SEGMENT_NAME_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace ddo::os {

// CheckSegmentName, and at least one byte.
absl::Status CheckNewSegment(const std::string& name, uint64_t bytes);

}  // namespace ddo::os

#endif  // DDO_OS_SEGMENT_NAME_H_
