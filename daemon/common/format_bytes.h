// File: daemon/common/format_bytes.h
//
// Sizes for people: "1.5 GiB", "512.0 MiB", "0 B" (binary units, one decimal).
//
// Thread-safety: a pure function, safe from any thread.
#ifndef DDO_DAEMON_COMMON_FORMAT_BYTES_H_
#define DDO_DAEMON_COMMON_FORMAT_BYTES_H_

#include <cstdint>
#include <string>

namespace ddo {

std::string FormatBytes(uint64_t bytes);

}  // namespace ddo

#endif  // DDO_DAEMON_COMMON_FORMAT_BYTES_H_
