// File: daemon/common/log_throttle.h
//
// Bounds how often one kind of log line is written: a loop that meets the same condition a
// million times a second (a flood of refused connections, accept failing with EMFILE) writes
// a few lines per interval and then one "suppressed N similar lines", not a million lines.
//
//   LogThrottle refused(absl::Seconds(10), /*burst=*/5);
//   if (uint64_t suppressed = 0; refused.Admit(absl::Now(), suppressed)) {
//     log->warn("refused a connection of {}{}", who, SuppressedNote(suppressed));
//   }
//   ...  // when the loop goes idle:
//   if (uint64_t n = refused.TakeSuppressed(absl::Now()); n > 0) log->warn(...);
//
// Thread-safety: none; one per loop (every accept loop runs on one thread).
#ifndef DDO_DAEMON_COMMON_LOG_THROTTLE_H_
#define DDO_DAEMON_COMMON_LOG_THROTTLE_H_

#include <cstdint>
#include <string>

#include "absl/time/time.h"

namespace ddo {

class LogThrottle {
 public:
  // At most `burst` lines in each `interval`; the rest are counted.
  LogThrottle(absl::Duration interval, int burst) : interval_(interval), burst_(burst) {}

  // Whether to write a line now. When it returns true, `suppressed` is the number of lines
  // held back since the last one written (to be said in that line), and the count restarts.
  bool Admit(absl::Time now, uint64_t& suppressed);

  // The lines held back, once their interval has passed (0 before, or when none were): for a
  // loop that goes quiet, so that the count is said even when no further line comes.
  uint64_t TakeSuppressed(absl::Time now);

  // When TakeSuppressed will next have something to say; InfiniteFuture when nothing waits.
  absl::Time NextReport() const;

 private:
  const absl::Duration interval_;
  const int burst_;
  absl::Time window_start_ = absl::InfinitePast();
  int written_in_window_ = 0;
  uint64_t suppressed_ = 0;
};

// "" or "; suppressed N similar lines", to end a line that Admit let through.
std::string SuppressedNote(uint64_t suppressed);

}  // namespace ddo

#endif  // DDO_DAEMON_COMMON_LOG_THROTTLE_H_
