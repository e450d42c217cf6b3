#include "daemon/config/config_file.h"

#include <sys/stat.h>

#ifndef _WIN32
#include <unistd.h>
#endif

#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "daemon/common/temp_dir_for_test.h"

namespace ddo {
namespace {

using ::testing::HasSubstr;

bool Known(absl::string_view name) { return name == "DDO_A" || name == "DDO_LOG_LEVEL"; }

TEST(ConfigFileTest, ParsesEnvironmentFileLines) {
  auto values = ParseConfigText("f.conf",
                                "# a comment\n"
                                "; another\n"
                                "\n"
                                "  DDO_A = 12 \n"
                                "DDO_LOG_LEVEL=\"debug\"\n",
                                Known);
  ASSERT_TRUE(values.ok()) << values.status();
  EXPECT_EQ(values->at("DDO_A"), "12");
  EXPECT_EQ(values->at("DDO_LOG_LEVEL"), "debug");
  EXPECT_EQ(values->size(), 2u);
}

TEST(ConfigFileTest, ErrorsNameTheFileAndLine) {
  auto values = ParseConfigText("/etc/ddo/ddod.conf", "DDO_A=1\nDDO_TYPO=2\n", Known);
  ASSERT_FALSE(values.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(values.status()));
  EXPECT_THAT(values.status().message(), HasSubstr("/etc/ddo/ddod.conf:2: DDO_TYPO is not a "
                                                   "variable ddod reads"));
  values = ParseConfigText("c", "DDO_A 1\n", Known);
  EXPECT_THAT(values.status().message(), HasSubstr("c:1: 'DDO_A 1' is not NAME=VALUE"));
  values = ParseConfigText("c", "DDO-A=1\n", Known);
  EXPECT_THAT(values.status().message(), HasSubstr("is not a variable name"));
  values = ParseConfigText("c", std::string("DDO_A=x\x1b[2Jy\n"), Known);
  EXPECT_THAT(values.status().message(), HasSubstr("control character"));
  // What was refused is shown escaped, never raw.
  values = ParseConfigText("c", std::string("\x1b[31m=1\n"), Known);
  ASSERT_FALSE(values.ok());
  EXPECT_EQ(std::string(values.status().message()).find('\x1b'), std::string::npos);
}

TEST(ConfigFileTest, OnlyRegularBoundedFilesAreRead) {
  TempDirForTest dir;
  const std::string missing = dir.path() + "/none.conf";
  EXPECT_THAT(ReadConfigFile(missing, Known).status().message(), HasSubstr("none.conf"));
  EXPECT_THAT(ReadConfigFile(dir.path(), Known).status().message(),
              HasSubstr("not a regular file"));
#ifndef _WIN32
  const std::string fifo = dir.path() + "/fifo.conf";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_THAT(ReadConfigFile(fifo, Known).status().message(), HasSubstr("not a regular file"));
#endif
  const std::string big = dir.path() + "/big.conf";
  std::ofstream(big) << std::string(kMaxConfigFileBytes + 1, '#');
  EXPECT_THAT(ReadConfigFile(big, Known).status().message(), HasSubstr("at most 65536"));
  const std::string good = dir.path() + "/ddod.conf";
  std::ofstream(good) << "DDO_A=3\n";
  auto values = ReadConfigFile(good, Known);
  ASSERT_TRUE(values.ok()) << values.status();
  EXPECT_EQ(values->at("DDO_A"), "3");
}

}  // namespace
}  // namespace ddo
