// File: proto/wire/include/ddo/wire/display_text.h
//
// Bounded, escaped text for logs, error messages and ddoctl output. A client's string (a cache
// key, a tensor name, a pattern) may be megabytes long or hold terminal escape sequences;
// EscapeForDisplay shows a short prefix of it that is safe to print anywhere.
//
// Thread-safety: pure function, safe from any thread.
#ifndef DDO_WIRE_DISPLAY_TEXT_H_
#define DDO_WIRE_DISPLAY_TEXT_H_

#include <cstddef>
#include <string>

#include "absl/strings/string_view.h"

namespace ddo {

// How many bytes of a client's string error messages show by default.
inline constexpr size_t kDisplayPrefixBytes = 64;

// The first `max_bytes` bytes of `text`, printable ASCII kept as is, '\' written as "\\" and
// every other byte (control characters, DEL, bytes >= 0x80) as "\xNN" (lowercase hex), followed
// by "..." when `text` was longer. The result holds at most 4 * max_bytes + 3 bytes and only
// printable ASCII.
std::string EscapeForDisplay(absl::string_view text, size_t max_bytes = kDisplayPrefixBytes);

}  // namespace ddo

#endif  // DDO_WIRE_DISPLAY_TEXT_H_
