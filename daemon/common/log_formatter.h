// File: daemon/common/log_formatter.h
//
// How a log line looks: text (the default: "2026-12-04T17:07:08.958 ddod[5218] info server:
// ..."), or one JSON object per line (--log-format json: "time" in UTC, "level", "logger",
// "pid", "message"); under systemd's journal (stderr is the stream JOURNAL_STREAM names) each
// line starts with its syslog priority ("<6>" for info, sd-daemon(3)) and the text form drops
// its timestamp, which the journal adds itself.
//
// Thread-safety: the parsers are pure; a LogFormatter is immutable, and spdlog calls format under
// its sink's lock (each logger holds its own clone).
#ifndef DDO_DAEMON_COMMON_LOG_FORMATTER_H_
#define DDO_DAEMON_COMMON_LOG_FORMATTER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "spdlog/formatter.h"

namespace ddo {

enum class LogFormat { kText, kJson };

// "text" or "json" (case-insensitive).
absl::StatusOr<LogFormat> ParseLogFormat(absl::string_view text);
absl::string_view LogFormatName(LogFormat format);

// Whether this process's stderr is the journal stream systemd announced in JOURNAL_STREAM.
bool StderrIsJournal();

class LogFormatter : public spdlog::formatter {
 public:
  LogFormatter(LogFormat format, bool journal) : format_(format), journal_(journal) {}

  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override;
  std::unique_ptr<spdlog::formatter> clone() const override {
    return std::make_unique<LogFormatter>(format_, journal_);
  }

 private:
  const LogFormat format_;
  const bool journal_;
};

}  // namespace ddo

#endif  // DDO_DAEMON_COMMON_LOG_FORMATTER_H_
