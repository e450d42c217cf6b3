#include "daemon/ctl/json_output.h"

#include <cstdint>

#include "ddo/v1/components.pb.h"
#include "ddo/v1/info.pb.h"
#include "ddo/v1/settings.pb.h"
#include "gtest/gtest.h"

namespace ddo {
namespace {

TEST(JsonOutputTest, NumbersAreNumbersAndEnumsShortNames) {
  ddo::v1::ComponentInfo info;
  info.mutable_ref()->set_cache_key("flux/transformer");
  info.set_state(ddo::v1::COMPONENT_STATE_READY);
  info.set_pinned_bytes(uint64_t{23802816640});
  info.set_last_used_unix_ms(-5);
  info.add_tensors()->set_name("w");
  const nlohmann::json json = MessageToPlainJson(info);
  EXPECT_EQ(json["state"], "ready");
  EXPECT_TRUE(json["pinned_bytes"].is_number_unsigned());
  EXPECT_EQ(json["pinned_bytes"].get<uint64_t>(), uint64_t{23802816640});
  EXPECT_EQ(json["last_used_unix_ms"].get<int64_t>(), -5);
  EXPECT_EQ(json["ref"]["cache_key"], "flux/transformer");
  EXPECT_EQ(json["tensors"].size(), 1u);
  EXPECT_EQ(json["sessions"], 0);           // defaults are present
  EXPECT_TRUE(json["segments"].is_array());  // so are empty lists
}

TEST(JsonOutputTest, UnsetMessagesAreLeftOutAndMapsAreObjects) {
  ddo::v1::ComponentInfo info;
  EXPECT_FALSE(MessageToPlainJson(info).contains("ref"));
  ddo::v1::ListPresetsResponse presets;
  (*presets.mutable_aliases())["auto"] = "one_shot_fast";
  auto* preset = presets.add_presets();
  (*preset->mutable_values())["DDO_PIN_CPU_MEMORY"] = "1";
  const nlohmann::json json = MessageToPlainJson(presets);
  EXPECT_EQ(json["aliases"]["auto"], "one_shot_fast");
  EXPECT_EQ(json["presets"][0]["values"]["DDO_PIN_CPU_MEMORY"], "1");
}

TEST(JsonOutputTest, ShortEnumNames) {
  const auto* backend = ddo::v1::Backend_descriptor();
  EXPECT_EQ(ShortEnumName(*backend->FindValueByNumber(ddo::v1::BACKEND_HOST)), "host");
  const auto* dtype = ddo::v1::DType_descriptor();  // DTYPE_*, not D_TYPE_*
  EXPECT_EQ(ShortEnumName(*dtype->FindValueByNumber(ddo::v1::DTYPE_BF16)), "bf16");
  const auto* state = ddo::v1::ComponentState_descriptor();
  EXPECT_EQ(ShortEnumName(*state->FindValueByNumber(ddo::v1::COMPONENT_STATE_UPLOADING)),
            "uploading");
}

}  // namespace
}  // namespace ddo
