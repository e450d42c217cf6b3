#include "daemon/common/format_bytes.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ddo {

std::string FormatBytes(uint64_t bytes) {
  constexpr double kKiB = 1024.0;
  const double value = static_cast<double>(bytes);
  if (bytes == 0) return "0 B";
  if (value >= kKiB * kKiB * kKiB) return absl::StrFormat("%.1f GiB", value / (kKiB * kKiB * kKiB));
  if (value >= kKiB * kKiB) return absl::StrFormat("%.1f MiB", value / (kKiB * kKiB));
  if (value >= kKiB) return absl::StrFormat("%.1f KiB", value / kKiB);
  return absl::StrCat(bytes, " B");
}

}  // namespace ddo
