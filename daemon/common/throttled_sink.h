// File: daemon/common/throttled_sink.h
//
// The sink every DDO logger writes through: stderr, with a bound on how many lines one logger
// writes per interval. ddod serves strangers, and most of its lines answer something a caller
// did (opened a lease, uploaded, was refused); a caller that does it in a loop must not turn
// ddod's log into a flood (issue 31, finding 2: a million lines a second from one accept
// loop). Past the burst, lines of that logger are counted, not written, until the interval
// ends; the next line written says how many were held back. Debug and trace lines are never
// held back: whoever turns them on asked for the volume.
//
// Loops that know their line repeats (the accept loops) throttle it themselves with a tighter
// LogThrottle (log_throttle.h); this is the bound for everything else.
//
// Thread-safety: spdlog's base_sink serializes sink_it_ and flush_ with its mutex.
#ifndef DDO_DAEMON_COMMON_THROTTLED_SINK_H_
#define DDO_DAEMON_COMMON_THROTTLED_SINK_H_

#include <cstdio>
#include <mutex>

#include "absl/time/time.h"
#include "daemon/common/log_throttle.h"
#include "spdlog/sinks/base_sink.h"

namespace ddo {

class ThrottledSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  // Lines each logger may write per interval before the rest are counted instead.
  static constexpr int kBurst = 200;
  static constexpr absl::Duration kInterval = absl::Seconds(10);

  // Writes to `out` (stderr by default; a test's file otherwise), which must outlive it.
  explicit ThrottledSink(std::FILE* out = stderr, int burst = kBurst,
                         absl::Duration interval = kInterval)
      : out_(out), burst_(burst), interval_(interval), throttle_(interval, burst) {}

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override;
  void flush_() override;

 private:
  void Write(const spdlog::details::log_msg& msg);

  std::FILE* const out_;
  const int burst_;
  const absl::Duration interval_;
  LogThrottle throttle_;
};

}  // namespace ddo

#endif  // DDO_DAEMON_COMMON_THROTTLED_SINK_H_
