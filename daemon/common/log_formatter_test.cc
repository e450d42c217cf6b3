#include "daemon/common/log_formatter.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "re2/re2.h"

namespace ddo {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

std::string Format(LogFormat format, bool journal, spdlog::level::level_enum level,
                   const std::string& payload) {
  LogFormatter formatter(format, journal);
  spdlog::details::log_msg message(spdlog::source_loc{}, "store", level, payload);
  spdlog::memory_buf_t out;
  formatter.format(message, out);
  return std::string(out.data(), out.size());
}

TEST(LogFormatterTest, JsonEscapesAndReplacesInvalidUtf8) {
  const std::string line = Format(LogFormat::kJson, false, spdlog::level::warn,
                                  "key \"k\\\" \x01 caf\xc3\xa9 bad \xff\xfe end");
  EXPECT_THAT(line, StartsWith("{\"time\":\""));
  EXPECT_THAT(line, HasSubstr("\"level\":\"warning\",\"logger\":\"store\",\"pid\":"));
  EXPECT_THAT(line, HasSubstr("\"message\":\"key \\\"k\\\\\\\" \\u0001 caf\xc3\xa9 bad "
                              "\\ufffd\\ufffd end\"}\n"));
}

TEST(LogFormatterTest, TheJournalGetsPrioritiesAndNoTimestamp) {
  EXPECT_EQ(Format(LogFormat::kText, true, spdlog::level::info, "serving"),
            "<6>info store: serving\n");
  EXPECT_THAT(Format(LogFormat::kText, true, spdlog::level::err, "x"), StartsWith("<3>error "));
  EXPECT_THAT(Format(LogFormat::kJson, true, spdlog::level::warn, "x"), StartsWith("<4>{"));
  // RE2, not MatchesRegex: gtest's own regex on Windows has no brackets or counts.
  const std::string line = Format(LogFormat::kText, false, spdlog::level::info, "x");
  EXPECT_TRUE(
      RE2::FullMatch(line, R"([0-9]{4}-[0-9]{2}-[0-9]{2}T.* ddod\[[0-9]+\] info store: x\n)"))
      << line;
}

TEST(LogFormatterTest, FormatNames) {
  EXPECT_EQ(*ParseLogFormat(" JSON "), LogFormat::kJson);
  EXPECT_EQ(*ParseLogFormat("text"), LogFormat::kText);
  EXPECT_THAT(ParseLogFormat("xml").status().message(), HasSubstr("valid: text, json"));
}

}  // namespace
}  // namespace ddo
