// File: daemon/policy/stream_settings_test.cc
#include "daemon/policy/stream_settings.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"

namespace ddo {
namespace {

using ::testing::HasSubstr;

StreamSettings Settings(std::map<std::string, std::string> values) {
  absl::StatusOr<StreamSettings> settings = ParseStreamSettings(values);
  EXPECT_TRUE(settings.ok()) << settings.status();
  return *settings;
}

TEST(StreamSettingsTest, BadValuesAreNamed) {
  EXPECT_THAT(ParseStreamSettings({{"DDO_STREAM_UNIT", "layer"}}).status().message(),
              HasSubstr("DDO_STREAM_UNIT='layer'"));
  EXPECT_THAT(ParseStreamSettings({{"DDO_RING_SLOTS", "1"}}).status().message(),
              HasSubstr("DDO_RING_SLOTS='1'"));
  EXPECT_THAT(ParseStreamSettings({{"DDO_VRAM_BUDGET_GB", "-3"}}).status().message(),
              HasSubstr("DDO_VRAM_BUDGET_GB"));
  EXPECT_THAT(ParseStreamSettings({{"DDO_RESIDENT_MODULE_SELECTION", "random"}}).status().message(),
              HasSubstr("spread"));
  EXPECT_THAT(
      ParseStreamSettings({{"DDO_ALWAYS_RESIDENT_MODULE_PATTERNS", "(unclosed"}}).status().message(),
      HasSubstr("DDO_ALWAYS_RESIDENT_MODULE_PATTERNS[0]='(unclosed' is not a regular expression"));
  EXPECT_TRUE(ParseStreamSettings({{"DDO_SOMETHING_ELSE", "x"}}).ok());
}

TEST(StreamSettingsTest, SmallTensorThresholdMustBeFiniteAndInRange) {
  for (const char* bad : {"1e308", "nan", "inf", "-inf", "-1", "1048577", "lots"}) {
    absl::StatusOr<StreamSettings> settings =
        ParseStreamSettings({{"DDO_SMALL_TENSOR_THRESHOLD_KB", bad}});
    ASSERT_FALSE(settings.ok()) << bad;
    EXPECT_TRUE(absl::IsInvalidArgument(settings.status()));
    EXPECT_THAT(settings.status().message(), HasSubstr("DDO_SMALL_TENSOR_THRESHOLD_KB='"));
    EXPECT_THAT(settings.status().message(), HasSubstr("from 0 to 1048576"));
  }
  EXPECT_EQ(Settings({{"DDO_SMALL_TENSOR_THRESHOLD_KB", "1048576"}}).small_tensor_bytes, 1ull << 30);
  EXPECT_EQ(Settings({{"DDO_SMALL_TENSOR_THRESHOLD_KB", "0.5"}}).small_tensor_bytes, 512u);
}

TEST(StreamSettingsTest, SizesAndOtherCatalogNumbersAreBounded) {
  for (const char* name : {"DDO_VRAM_BUDGET_GB", "DDO_ACTIVATION_RESERVE_GB",
                           "DDO_RESIDENT_MODULE_BUDGET_GB", "DDO_MAX_PIN_WEIGHT_BUDGET_GB",
                           "DDO_AUTO_VRAM_HEADROOM_GB", "DDO_PIN_WEIGHT_BUDGET_RATIO"}) {
    for (const char* bad : {"1e308", "nan", "inf", "-1"}) {
      absl::StatusOr<StreamSettings> settings = ParseStreamSettings({{name, bad}});
      ASSERT_FALSE(settings.ok()) << name << "=" << bad;
      EXPECT_THAT(settings.status().message(), HasSubstr(name));
      EXPECT_THAT(settings.status().message(), HasSubstr("from 0 to"));
    }
  }
  EXPECT_TRUE(ParseStreamSettings({{"DDO_MAX_PIN_WEIGHT_BUDGET_GB", "64"},
                                   {"DDO_AVAILABLE_SYSTEM_RAM_GB", ""},
                                   {"DDO_RESIDENT_MODULE_BUDGET_GB", "auto"}})
                  .ok());
}

TEST(StreamSettingsTest, CatalogChoicesAreChecked) {
  EXPECT_TRUE(ParseStreamSettings({{"DDO_FUSED_LORA", "stored"}}).ok());
  EXPECT_TRUE(ParseStreamSettings({{"DDO_FUSED_LORA", "On_Arrival"}}).ok());
  for (const char* bad : {"", "sometimes", "stored;"}) {
    absl::StatusOr<StreamSettings> settings = ParseStreamSettings({{"DDO_FUSED_LORA", bad}});
    ASSERT_FALSE(settings.ok()) << bad;
    EXPECT_THAT(settings.status().message(), HasSubstr("DDO_FUSED_LORA='"));
    EXPECT_THAT(settings.status().message(), HasSubstr("must be one of on_arrival, stored"));
  }
}

TEST(StreamSettingsTest, PatternListsAreBounded) {
  for (const char* name : {"DDO_ALWAYS_RESIDENT_MODULE_PATTERNS", "DDO_RESIDENT_MODULE_PATTERNS"}) {
    // Too long.
    absl::StatusOr<StreamSettings> settings =
        ParseStreamSettings({{name, "ok," + std::string(513, 'a')}});
    ASSERT_FALSE(settings.ok());
    EXPECT_THAT(settings.status().message(), HasSubstr(absl::StrCat(name, "[1]='aaaa")));
    EXPECT_THAT(settings.status().message(), HasSubstr("at most 512"));
    // Too many.
    std::string many = "a";
    for (int i = 0; i < 64; ++i) many += ",a";
    settings = ParseStreamSettings({{name, many}});
    ASSERT_FALSE(settings.ok());
    EXPECT_THAT(settings.status().message(), HasSubstr(absl::StrCat(name, ": 65 patterns, at most 64")));
    // Not RE2 (a backreference).
    settings = ParseStreamSettings({{name, "(a)\\1"}});
    ASSERT_FALSE(settings.ok());
    EXPECT_THAT(settings.status().message(), HasSubstr(absl::StrCat(name, "[0]=")));
  }
}

}  // namespace
}  // namespace ddo
