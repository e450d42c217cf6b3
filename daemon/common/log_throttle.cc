#include "daemon/common/log_throttle.h"

#include "absl/strings/str_cat.h"

namespace ddo {

bool LogThrottle::Admit(absl::Time now, uint64_t& suppressed) {
  if (now - window_start_ >= interval_) {
    window_start_ = now;
    written_in_window_ = 0;
  }
  if (written_in_window_ >= burst_) {
    ++suppressed_;
    return false;
  }
  ++written_in_window_;
  suppressed = suppressed_;
  suppressed_ = 0;
  return true;
}

uint64_t LogThrottle::TakeSuppressed(absl::Time now) {
  if (suppressed_ == 0 || now < NextReport()) return 0;
  const uint64_t held = suppressed_;
  suppressed_ = 0;
  // The report is a line of this kind: it counts against the new window.
  window_start_ = now;
  written_in_window_ = 1;
  return held;
}

absl::Time LogThrottle::NextReport() const {
  return suppressed_ == 0 ? absl::InfiniteFuture() : window_start_ + interval_;
}

std::string SuppressedNote(uint64_t suppressed) {
  if (suppressed == 0) return "";
  return absl::StrCat("; suppressed ", suppressed, " similar line", suppressed == 1 ? "" : "s");
}

}  // namespace ddo
