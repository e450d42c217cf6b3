#include "daemon/common/throttled_sink.h"

#include <cstdio>
#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "daemon/common/log_formatter.h"
#include "gtest/gtest.h"
#include "spdlog/logger.h"

namespace ddo {
namespace {

// Everything a logger writing through a ThrottledSink into a temporary file wrote.
class ThrottledSinkTest : public ::testing::Test {
 protected:
  void SetUp() override {
    file_ = std::tmpfile();
    ASSERT_NE(file_, nullptr);
    auto sink = std::make_shared<ThrottledSink>(file_, /*burst=*/5, absl::Hours(1));
    sink->set_formatter(std::make_unique<LogFormatter>(LogFormat::kText, false));
    logger_ = std::make_shared<spdlog::logger>("flood", sink);
    logger_->set_level(spdlog::level::trace);
  }
  void TearDown() override { std::fclose(file_); }

  std::vector<std::string> Lines() {
    logger_->flush();
    std::string text;
    std::rewind(file_);
    char buffer[4096];
    for (size_t n; (n = std::fread(buffer, 1, sizeof(buffer), file_)) > 0;) text.append(buffer, n);
    return absl::StrSplit(text, '\n', absl::SkipEmpty());
  }

  std::FILE* file_ = nullptr;
  std::shared_ptr<spdlog::logger> logger_;
};

TEST_F(ThrottledSinkTest, AFloodOfLinesIsCutToTheBurst) {
  for (int i = 0; i < 100000; ++i) logger_->warn("refused caller {}", i);
  const std::vector<std::string> lines = Lines();
  ASSERT_EQ(lines.size(), 5u);
  EXPECT_TRUE(absl::StrContains(lines[0], "refused caller 0"));
  EXPECT_TRUE(absl::StrContains(lines[4], "refused caller 4"));
}

TEST_F(ThrottledSinkTest, DebugLinesAreNeverHeldBack) {
  for (int i = 0; i < 50; ++i) logger_->debug("step {}", i);
  EXPECT_EQ(Lines().size(), 50u);
}

TEST_F(ThrottledSinkTest, TheNextLineWrittenSaysHowManyWereHeldBack) {
  auto sink = std::make_shared<ThrottledSink>(file_, /*burst=*/2, absl::Milliseconds(50));
  sink->set_formatter(std::make_unique<LogFormatter>(LogFormat::kText, false));
  spdlog::logger logger("flood", sink);
  for (int i = 0; i < 10; ++i) logger.info("line {}", i);
  absl::SleepFor(absl::Milliseconds(60));
  logger.info("after the flood");
  const std::vector<std::string> lines = Lines();
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_TRUE(absl::StrContains(lines[2], "held back 8 lines of this logger")) << lines[2];
  EXPECT_TRUE(absl::StrContains(lines[3], "after the flood"));
}

}  // namespace
}  // namespace ddo
