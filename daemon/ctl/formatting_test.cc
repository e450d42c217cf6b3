#include "daemon/ctl/formatting.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ddo {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(FormattingTest, Bytes) {
  EXPECT_EQ(FormatBytes(0), "0 B");
  EXPECT_EQ(FormatBytes(512), "512 B");
  EXPECT_EQ(FormatBytes(1536), "1.5 KiB");
  EXPECT_EQ(FormatBytes(3ull << 20), "3.0 MiB");
  EXPECT_EQ(FormatBytes(24ull << 30), "24.0 GiB");
}

TEST(FormattingTest, Durations) {
  EXPECT_EQ(FormatDuration(12.34), "12.3s");
  EXPECT_EQ(FormatDuration(250), "4m 10s");
  EXPECT_EQ(FormatDuration(3 * 3600 + 120), "3h 02m");
  EXPECT_EQ(FormatDuration(2 * 86400 + 5 * 3600), "2d 05h");
}

TEST(FormattingTest, StatusShowsWhatAnOperatorNeeds) {
  ddo::v1::DaemonInfo info;
  info.set_version("0.1.0");
  info.set_api_version("ddo.v1");
  info.set_pid(42);
  info.set_uptime_seconds(5);
  info.add_listen_addresses("unix:/run/ddo/ddod.sock");
  info.set_requested_preset("auto");
  info.set_effective_preset("one_shot_fast");
  info.set_backend(ddo::v1::BACKEND_CUDA);
  info.set_backend_detail("CUDA driver 13.0");
  info.set_ram_budget_bytes(100ull << 30);
  info.mutable_platform()->set_os(ddo::v1::OS_KIND_LINUX);
  info.mutable_platform()->set_ram_total_bytes(128ull << 30);
  auto* device = info.add_devices();
  device->set_ordinal(0);
  device->set_name("NVIDIA H200");
  device->set_uuid("GPU-0123");
  device->set_total_bytes(140ull << 30);
  device->set_free_bytes(139ull << 30);
  device->set_vram_budget_bytes(16ull << 30);
  device->set_h2d_gbps(55.25);

  const std::string text = FormatStatus(info, "SERVING");
  EXPECT_THAT(text, HasSubstr("ddod 0.1.0 (ddo.v1), pid 42, up 5.0s: SERVING"));
  EXPECT_THAT(text, HasSubstr("unix:/run/ddo/ddod.sock"));
  EXPECT_THAT(text, HasSubstr("auto -> one_shot_fast"));
  EXPECT_THAT(text, HasSubstr("cuda: CUDA driver 13.0"));
  EXPECT_THAT(text, HasSubstr("pool budget 100.0 GiB"));
  EXPECT_THAT(text, HasSubstr("NVIDIA H200  GPU-0123"));
  EXPECT_THAT(text, HasSubstr("140.0 GiB total, 139.0 GiB free, budget 16.0 GiB"));
  EXPECT_THAT(text, HasSubstr("pinned host-to-device 55.2 GB/s"));
  EXPECT_THAT(text, Not(HasSubstr("embedded")));
  EXPECT_THAT(text, Not(HasSubstr("--ram-budget-scope runners")));
  info.set_ram_budget_counts_runners(true);
  EXPECT_THAT(FormatStatus(info, "SERVING"),
              HasSubstr("pool budget 100.0 GiB (with ddod and its runners: --ram-budget-scope "
                        "runners)"));
}

TEST(FormattingTest, PresetsListAndDetail) {
  ddo::v1::ListPresetsResponse presets;
  auto* preset = presets.add_presets();
  preset->set_name("warm_process");
  preset->set_description("Long-lived service");
  (*preset->mutable_values())["DDO_PIN_CPU_MEMORY"] = "1";
  (*presets.mutable_aliases())["auto"] = "one_shot_fast";
  presets.set_daemon_preset("warm_process");

  EXPECT_THAT(FormatPresetList(presets), HasSubstr("* warm_process  Long-lived service"));
  EXPECT_THAT(FormatPresetList(presets), HasSubstr("alias of one_shot_fast"));
  bool found = false;
  EXPECT_THAT(FormatPreset(presets, "WARM_PROCESS", &found), HasSubstr("DDO_PIN_CPU_MEMORY  1"));
  EXPECT_TRUE(found);
  EXPECT_THAT(FormatPreset(presets, "nope", &found), HasSubstr("no preset named 'nope'"));
  ASSERT_NE(FindPreset(presets, "Warm_Process"), nullptr);
  EXPECT_EQ(FindPreset(presets, "Warm_Process")->name(), "warm_process");
  EXPECT_EQ(FindPreset(presets, "nope"), nullptr);
  EXPECT_THAT(NoSuchPreset(presets, "a\x1b[2Jb"), Not(HasSubstr("\x1b")));  // escaped
  EXPECT_FALSE(found);
}

TEST(FormattingTest, SessionsShowHowAStreamGoes) {
  ddo::v1::ListSessionsResponse sessions;
  auto* host = sessions.add_sessions();
  host->set_session_id("aaaaaaaa");
  host->set_cache_key("vae");
  auto* streaming = sessions.add_sessions();
  streaming->set_session_id("bbbbbbbb");
  streaming->set_cache_key("transformer");
  streaming->set_device_uuid("GPU-1234");
  streaming->set_device_bytes(3ull << 30);
  streaming->set_resident_bytes(2ull << 30);
  streaming->set_ring_slots(8);
  streaming->set_schedule_length(209);
  streaming->set_streamed_bytes(9ull << 30);
  streaming->set_produced_uses(418);
  streaming->set_out_of_schedule_uses(209);
  const std::string text = FormatSessions(sessions);
  EXPECT_THAT(text, HasSubstr("session aaaaaaaa  pid 0        vae on host\n  session"));
  EXPECT_THAT(text, HasSubstr("transformer on GPU-1234"));
  EXPECT_THAT(text, HasSubstr("device 3.0 GiB (resident 2.0 GiB, up to 8 units in flight), schedule 209 uses/cycle"));
  EXPECT_THAT(text, HasSubstr("streamed 9.0 GiB in 418 uses"));
  EXPECT_THAT(text, HasSubstr("209 out of schedule"));
}

TEST(FormattingTest, ADerivedComponentSaysWhatItSharesAndWhatItOwns) {
  ddo::v1::ListComponentsResponse components;
  auto* base = components.add_components();
  base->mutable_ref()->set_cache_key("flux/transformer");
  base->mutable_ref()->set_total_bytes(24ull << 30);
  base->set_state(ddo::v1::COMPONENT_STATE_READY);
  base->set_own_bytes(24ull << 30);
  auto* derived = components.add_components();
  derived->mutable_ref()->set_cache_key("flux/transformer+lora");
  derived->mutable_ref()->set_total_bytes(24ull << 30);
  derived->set_state(ddo::v1::COMPONENT_STATE_READY);
  derived->set_base_cache_key("flux/transformer\x1b[2J");
  derived->set_changed_tensors(114);
  derived->set_own_bytes(3ull << 30);
  const std::string text = FormatComponents(components);
  EXPECT_THAT(text, HasSubstr("derived from flux/transformer"));
  EXPECT_THAT(text, HasSubstr("114 changed tensors, 3.0 GiB own\n"));
  EXPECT_THAT(text, Not(HasSubstr("\x1b[2J")));  // a key is shown escaped
  EXPECT_EQ(text.find("derived from"), text.rfind("derived from"));  // the base has no such line
}

TEST(FormattingTest, SettingsNameTheirSources) {
  ddo::v1::ResolvedSettings settings;
  settings.set_requested_preset("auto");
  settings.set_effective_preset("one_shot_fast");
  auto* pin = settings.add_values();
  pin->set_name("DDO_PIN_CPU_MEMORY");
  pin->set_value("0");
  pin->set_source(ddo::v1::SETTING_SOURCE_PLATFORM);
  auto* component = settings.add_components();
  component->set_component("vae");
  auto* route = component->add_values();
  route->set_name("DDO_VAE_ROUTE");
  route->set_value("dynamic_offload");
  const std::string text = FormatSettings(settings);
  EXPECT_THAT(text, HasSubstr("preset: auto -> one_shot_fast\n"));
  EXPECT_THAT(text, HasSubstr("  DDO_PIN_CPU_MEMORY  0             (platform rule)\n"));
  EXPECT_THAT(text, HasSubstr("component vae\n  DDO_VAE_ROUTE  dynamic_offload  (default)\n"));
}

}  // namespace
}  // namespace ddo
