#include "daemon/common/logging.h"

#include <mutex>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "daemon/common/throttled_sink.h"
#include "ddo/wire/display_text.h"

namespace ddo {
namespace {

std::mutex& LoggingMutex() {
  static std::mutex mutex;
  return mutex;
}

// Guarded by LoggingMutex().
spdlog::level::level_enum& CurrentLevel() {
  static spdlog::level::level_enum level = spdlog::level::info;
  return level;
}

}  // namespace

absl::StatusOr<spdlog::level::level_enum> ParseLogLevel(absl::string_view text) {
  const std::string lowered = absl::AsciiStrToLower(absl::StripAsciiWhitespace(text));
  if (lowered == "trace") return spdlog::level::trace;
  if (lowered == "debug") return spdlog::level::debug;
  if (lowered == "info") return spdlog::level::info;
  if (lowered == "warn" || lowered == "warning") return spdlog::level::warn;
  if (lowered == "error") return spdlog::level::err;
  if (lowered == "critical") return spdlog::level::critical;
  if (lowered == "off") return spdlog::level::off;
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown log level '", EscapeForDisplay(text), "'; valid: trace, debug, info, warn, error, critical, off"));
}

void InitLogging(spdlog::level::level_enum level, LogFormat format) {
  std::lock_guard<std::mutex> lock(LoggingMutex());
  CurrentLevel() = level;
  // The registry hands a clone to every logger, existing and future.
  spdlog::set_formatter(std::make_unique<LogFormatter>(format, StderrIsJournal()));
  spdlog::set_level(level);
  spdlog::apply_all([level](const std::shared_ptr<spdlog::logger>& logger) {
    logger->set_level(level);
  });
}

std::shared_ptr<spdlog::logger> Logger(const std::string& name) {
  std::lock_guard<std::mutex> lock(LoggingMutex());
  if (auto existing = spdlog::get(name)) {
    return existing;
  }
  // Each logger its own throttled sink: one chatty logger does not silence the others.
  auto logger = std::make_shared<spdlog::logger>(name, std::make_shared<ThrottledSink>());
  spdlog::initialize_logger(logger);  // the registry's formatter and level, and registered
  logger->set_level(CurrentLevel());
  return logger;
}

}  // namespace ddo
