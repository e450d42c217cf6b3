// File: daemon/ctl/layout_file_test.cc
#include "daemon/ctl/layout_file.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace ddo {
namespace {

using ::testing::HasSubstr;

TEST(LayoutFileTest, ParsesAComponentLayout) {
  absl::StatusOr<ddo::v1::ExplainPlanRequest> request = ParseLayout(R"({
    "component": "transformer", "device": "cuda:0", "settings": {"DDO_PRESET": "off"},
    "tensors": [{"name": "a.weight", "dtype": "BF16", "shape": [4, 8], "module_path": "a",
                 "module_class": "Linear"},
                {"name": "b", "dtype": "F32", "shape": []}]})", "layout.json");
  ASSERT_TRUE(request.ok()) << request.status();
  EXPECT_EQ(request->component(), "transformer");
  EXPECT_EQ(request->device_uuid(), "cuda:0");
  EXPECT_EQ(request->settings().at("DDO_PRESET"), "off");
  ASSERT_EQ(request->tensors_size(), 2);
  EXPECT_EQ(request->tensors(0).byte_size(), 64u);
  EXPECT_EQ(request->tensors(0).dtype(), ddo::v1::DTYPE_BF16);
  EXPECT_EQ(request->tensors(0).module_class(), "Linear");
  EXPECT_EQ(request->tensors(1).byte_size(), 4u);
}

TEST(LayoutFileTest, MistakesAreNamed) {
  auto message = [](const std::string& text) {
    return std::string(ParseLayout(text, "l.json").status().message());
  };
  EXPECT_THAT(message("nope"), HasSubstr("l.json: not a JSON object"));
  EXPECT_THAT(message("{}"), HasSubstr("\"tensors\" must be an array"));
  EXPECT_THAT(message(R"({"tensors": [{"name": "x", "dtype": "Q4", "shape": [1]}]})"),
              HasSubstr("x: "));
  EXPECT_THAT(message(R"({"tensors": [{"name": "x", "dtype": "F32"}]})"),
              HasSubstr("needs a \"shape\""));
  EXPECT_THAT(message(R"({"tensors": [{"dtype": "F32"}]})"), HasSubstr("tensors[0] needs a \"name\""));
}

}  // namespace
}  // namespace ddo
