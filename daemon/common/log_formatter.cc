#include "daemon/common/log_formatter.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "ddo/os/process_watch.h"
#include "ddo/os/system_facts.h"
#include "ddo/wire/display_text.h"

namespace ddo {
namespace {

// sd-daemon(3) priorities: the journal files each line at its level.
int SyslogPriority(spdlog::level::level_enum level) {
  switch (level) {
    case spdlog::level::critical: return 2;
    case spdlog::level::err: return 3;
    case spdlog::level::warn: return 4;
    case spdlog::level::info: return 6;
    default: return 7;
  }
}

void Append(spdlog::memory_buf_t& dest, absl::string_view text) {
  dest.append(text.data(), text.data() + text.size());
}

// The length of the valid UTF-8 sequence at the start of `text`, or 0.
size_t Utf8Length(absl::string_view text) {
  const auto byte = [&text](size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char lead = byte(0);
  size_t length = lead >= 0xf0 && lead <= 0xf4 ? 4 : lead >= 0xe0 ? 3 : lead >= 0xc2 ? 2 : 0;
  if (length == 0 || lead >= 0xf5 || text.size() < length) return 0;
  for (size_t i = 1; i < length; ++i) {
    if ((byte(i) & 0xc0) != 0x80) return 0;
  }
  // Overlong three- and four-byte forms, surrogates, beyond U+10FFFF.
  if ((lead == 0xe0 && byte(1) < 0xa0) || (lead == 0xed && byte(1) >= 0xa0) ||
      (lead == 0xf0 && byte(1) < 0x90) || (lead == 0xf4 && byte(1) >= 0x90)) {
    return 0;
  }
  return length;
}

// `text` as the contents of a JSON string: quotes, backslashes and control characters escaped,
// a byte that is not valid UTF-8 replaced by U+FFFD (a JSON parser would refuse the line).
void AppendJsonString(spdlog::memory_buf_t& dest, absl::string_view text) {
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (static_cast<unsigned char>(c) >= 0x80) {
      const size_t length = Utf8Length(text.substr(i));
      if (length == 0) {
        Append(dest, "\\ufffd");
      } else {
        Append(dest, text.substr(i, length));
        i += length - 1;
      }
      continue;
    }
    switch (c) {
      case '"': Append(dest, "\\\""); break;
      case '\\': Append(dest, "\\\\"); break;
      case '\n': Append(dest, "\\n"); break;
      case '\r': Append(dest, "\\r"); break;
      case '\t': Append(dest, "\\t"); break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          Append(dest, absl::StrFormat("\\u%04x", static_cast<unsigned char>(c)));
        } else {
          dest.push_back(c);
        }
    }
  }
}

}  // namespace

absl::StatusOr<LogFormat> ParseLogFormat(absl::string_view text) {
  const std::string lowered = absl::AsciiStrToLower(absl::StripAsciiWhitespace(text));
  if (lowered == "text") return LogFormat::kText;
  if (lowered == "json") return LogFormat::kJson;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown log format '", EscapeForDisplay(text), "'; valid: text, json"));
}

absl::string_view LogFormatName(LogFormat format) {
  return format == LogFormat::kJson ? "json" : "text";
}

bool StderrIsJournal() { return os::StderrIsSystemJournal(); }

void LogFormatter::format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) {
  if (journal_) Append(dest, absl::StrCat("<", SyslogPriority(msg.level), ">"));
  const absl::string_view level(spdlog::level::to_string_view(msg.level).data(),
                                spdlog::level::to_string_view(msg.level).size());
  const absl::string_view logger(msg.logger_name.data(), msg.logger_name.size());
  const absl::string_view payload(msg.payload.data(), msg.payload.size());
  const absl::Time time = absl::FromChrono(msg.time);
  if (format_ == LogFormat::kJson) {
    Append(dest, "{\"time\":\"");
    Append(dest, absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", time, absl::UTCTimeZone()));
    Append(dest, "\",\"level\":\"");
    Append(dest, level);
    Append(dest, "\",\"logger\":\"");
    AppendJsonString(dest, logger);
    Append(dest, absl::StrCat("\",\"pid\":", os::CurrentProcessId(), ",\"message\":\""));
    AppendJsonString(dest, payload);
    Append(dest, "\"}\n");
    return;
  }
  if (!journal_) {
    Append(dest, absl::FormatTime("%Y-%m-%dT%H:%M:%E3S", time, absl::LocalTimeZone()));
    Append(dest, absl::StrCat(" ddod[", os::CurrentProcessId(), "] "));
  }
  msg.color_range_start = dest.size();
  Append(dest, level);
  msg.color_range_end = dest.size();
  Append(dest, " ");
  Append(dest, logger);
  Append(dest, ": ");
  Append(dest, payload);
  Append(dest, "\n");
}

}  // namespace ddo
