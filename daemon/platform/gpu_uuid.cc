#include "absl/strings/str_format.h"
#include "daemon/platform/gpu_inventory.h"

namespace ddo {

std::string FormatGpuUuid(const unsigned char (&b)[16]) {
  return absl::StrFormat(
      "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
      b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
}

}  // namespace ddo
