#include "daemon/common/throttled_sink.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace ddo {

void ThrottledSink::sink_it_(const spdlog::details::log_msg& msg) {
  if (msg.level < spdlog::level::info) {
    Write(msg);
    return;
  }
  uint64_t suppressed = 0;
  if (!throttle_.Admit(absl::Now(), suppressed)) return;
  if (suppressed > 0) {
    const std::string note =
        absl::StrCat("held back ", suppressed, " line", suppressed == 1 ? "" : "s",
                     " of this logger (more than ", burst_, " in ",
                     absl::FormatDuration(interval_), ")");
    Write(spdlog::details::log_msg(msg.time, msg.source, msg.logger_name, spdlog::level::warn,
                                   spdlog::string_view_t(note.data(), note.size())));
  }
  Write(msg);
}

void ThrottledSink::Write(const spdlog::details::log_msg& msg) {
  spdlog::memory_buf_t formatted;
  formatter_->format(msg, formatted);
  std::fwrite(formatted.data(), 1, formatted.size(), out_);
  std::fflush(out_);  // stderr is unbuffered; a test's file is not
}

void ThrottledSink::flush_() { std::fflush(out_); }

}  // namespace ddo
