// File: proto/wire/src/display_text.cc
#include "ddo/wire/display_text.h"

namespace ddo {

std::string EscapeForDisplay(absl::string_view text, size_t max_bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  const absl::string_view shown = text.substr(0, max_bytes);
  std::string out;
  out.reserve(shown.size() + 3);
  for (char c : shown) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte == '\\') {
      out += "\\\\";
    } else if (byte >= 0x20 && byte < 0x7f) {
      out.push_back(c);
    } else {
      out += "\\x";
      out.push_back(kHex[byte >> 4]);
      out.push_back(kHex[byte & 0xf]);
    }
  }
  if (text.size() > shown.size()) out += "...";
  return out;
}

}  // namespace ddo
