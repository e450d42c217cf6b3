#include "daemon/ctl/top_view.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ddo {
namespace {

using ::testing::HasSubstr;

TEST(TopViewTest, RatesComeFromTwoSnapshots) {
  ddo::v1::DaemonInfo info;
  info.set_version("0.1.0");
  info.set_effective_preset("warm_process");
  TopSnapshot before;
  before.taken = absl::FromUnixSeconds(100);
  before.stats.set_uptime_seconds(3725);
  before.stats.mutable_stream()->set_bytes_streamed(10'000'000'000);
  before.stats.mutable_stream()->set_runner_waits(10);
  auto* session = before.sessions.add_sessions();
  session->set_session_id("a1b2c3d4e5f6");
  session->set_cache_key("flux/transformer");
  session->set_device_uuid("GPU-f9715109");
  session->set_streamed_bytes(4'000'000'000);
  session->set_client_pid(4242);

  TopSnapshot now = before;
  now.taken = before.taken + absl::Seconds(2);
  now.stats.mutable_stream()->set_bytes_streamed(110'000'000'000);
  now.stats.mutable_stream()->set_runner_waits(14);
  now.sessions.mutable_sessions(0)->set_streamed_bytes(104'000'000'000);

  EXPECT_THAT(FormatTop(info, now, std::nullopt), HasSubstr("streaming - now"));
  const std::string screen = FormatTop(info, now, before);
  EXPECT_THAT(screen, HasSubstr("up 1h 02m"));
  EXPECT_THAT(screen, HasSubstr("streaming 50.0 GB/s now"));
  EXPECT_THAT(screen, HasSubstr("runner stalls 2.0/s (14 in all)"));
  EXPECT_THAT(screen, HasSubstr("a1b2c3d4  4242     flux/transformer"));
  EXPECT_THAT(screen, HasSubstr("50.0 GB/s"));
  EXPECT_THAT(screen, HasSubstr("(the pool is empty)"));

  auto* component = now.components.add_components();
  component->mutable_ref()->set_cache_key("flux/transformer");
  component->set_own_bytes(uint64_t{12} << 30);
  component->set_sessions(1);
  component->set_keep_alive_seconds(-1);
  EXPECT_THAT(FormatTop(info, now, before), HasSubstr("12.0 GiB        1"));
  EXPECT_THAT(FormatTop(info, now, before), HasSubstr("never"));
  EXPECT_THAT(FormatTop(info, now, before),
              HasSubstr("pool by user:  other users (shared with you) 12.0 GiB (1)"));
  component->set_owner_uid(1000);
  component->set_owner_shown(true);
  EXPECT_THAT(FormatTop(info, now, before), HasSubstr("pool by user:  uid 1000 12.0 GiB (1)"));
}

TEST(TopViewTest, AStrangersTextIsEscaped) {
  ddo::v1::DaemonInfo info;
  TopSnapshot now;
  now.sessions.add_sessions()->set_cache_key("evil\x1b[2Jkey");
  const std::string screen = FormatTop(info, now, std::nullopt);
  EXPECT_EQ(screen.find('\x1b'), std::string::npos);
}

}  // namespace
}  // namespace ddo
