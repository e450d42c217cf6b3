// File: daemon/common/logging.h
//
// spdlog setup. Every component logs through its own named logger ("server", "lease",
// "platform", ...) so a line says where it came from; all share one stderr sink and one level.
//
//   auto log = ddo::Logger("server");
//   log->info("serving on {}", address);
//
// Thread-safety: any thread; InitLogging and Logger serialize on one mutex, and spdlog's loggers
// are thread-safe.
#ifndef DDO_DAEMON_COMMON_LOGGING_H_
#define DDO_DAEMON_COMMON_LOGGING_H_

#include <memory>
#include <string>
#include "absl/strings/string_view.h"

#include "absl/status/statusor.h"
#include "daemon/common/log_formatter.h"
#include "spdlog/spdlog.h"

// Debian's Abseil has its own string_view class (not std::string_view): teach fmt to print it,
// so status messages can be logged directly.
template <>
struct fmt::formatter<absl::string_view> : fmt::formatter<fmt::string_view> {
  template <typename FormatContext>
  auto format(absl::string_view text, FormatContext& ctx) const {
    return fmt::formatter<fmt::string_view>::format(fmt::string_view(text.data(), text.size()),
                                                    ctx);
  }
};

namespace ddo {

// Parses trace|debug|info|warn|warning|error|critical|off (case-insensitive).
absl::StatusOr<spdlog::level::level_enum> ParseLogLevel(absl::string_view text);

// Sets the level and the line format (log_formatter.h; under systemd's journal, priority
// prefixes) of every existing and future DDO logger. Safe to call more than once.
void InitLogging(spdlog::level::level_enum level, LogFormat format = LogFormat::kText);

// Returns the logger named `name`, creating it on first use. Thread-safe.
std::shared_ptr<spdlog::logger> Logger(const std::string& name);

}  // namespace ddo

#endif  // DDO_DAEMON_COMMON_LOGGING_H_
