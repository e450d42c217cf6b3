#include "daemon/ctl/metrics_text.h"

#include <cmath>
#include <limits>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ddo {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(MetricsTextTest, WritesTheTextFormat) {
  ddo::v1::DaemonInfo info;
  info.set_version("0.1.0");
  info.set_api_version("ddo.v1");
  info.set_effective_preset("warm_\"process\\");
  ddo::v1::Stats stats;
  stats.set_uptime_seconds(12.5);
  stats.mutable_pool()->set_used_bytes(uint64_t{1} << 40);
  stats.mutable_stream()->set_bytes_streamed(123456789012345);
  stats.add_latency_bucket_seconds(0.001);
  stats.add_latency_bucket_seconds(1);
  auto* rpc = stats.add_rpcs();
  rpc->set_method("Attach");
  rpc->set_ok(3);
  rpc->set_failed(1);
  rpc->set_timed(4);
  rpc->set_seconds_sum(0.25);
  rpc->add_at_most(1);
  rpc->add_at_most(4);
  auto* lease = stats.add_rpcs();
  lease->set_method("Connect");
  lease->set_ok(2);

  const std::string text = FormatMetrics(info, stats);
  EXPECT_THAT(text, HasSubstr("# TYPE ddo_pool_used_bytes gauge\nddo_pool_used_bytes 1099511627776\n"));
  EXPECT_THAT(text, HasSubstr("ddo_stream_bytes_total 123456789012345\n"));
  EXPECT_THAT(text, HasSubstr("ddo_uptime_seconds 12.5\n"));
  EXPECT_THAT(text, HasSubstr("preset=\"warm_\\\"process\\\\\""));
  EXPECT_THAT(text, HasSubstr("ddo_rpc_requests_total{method=\"Attach\",result=\"failed\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("ddo_rpc_duration_seconds_bucket{method=\"Attach\",le=\"0.001\"} 1\n"
                              "ddo_rpc_duration_seconds_bucket{method=\"Attach\",le=\"1\"} 4\n"
                              "ddo_rpc_duration_seconds_bucket{method=\"Attach\",le=\"+Inf\"} 4\n"
                              "ddo_rpc_duration_seconds_sum{method=\"Attach\"} 0.25\n"
                              "ddo_rpc_duration_seconds_count{method=\"Attach\"} 4\n"));
  // The lease stream is counted, not timed.
  EXPECT_THAT(text, HasSubstr("ddo_rpc_requests_total{method=\"Connect\",result=\"ok\"} 2\n"));
  EXPECT_THAT(text, Not(HasSubstr("ddo_rpc_duration_seconds_count{method=\"Connect\"}")));
  EXPECT_EQ(text.back(), '\n');
}

TEST(MetricsTextTest, FloatsAreWrittenInTheirShortestRoundTripForm) {
  ddo::v1::Stats stats;
  stats.set_uptime_seconds(2.2582494020000001);
  stats.add_latency_bucket_seconds(0.1);
  auto* rpc = stats.add_rpcs();
  rpc->set_method("Attach");
  rpc->set_timed(1);
  rpc->set_seconds_sum(0.30000000000000004);
  rpc->add_at_most(1);
  const std::string text = FormatMetrics(ddo::v1::DaemonInfo(), stats);
  EXPECT_THAT(text, HasSubstr("ddo_uptime_seconds 2.258249402\n"));
  EXPECT_THAT(text, HasSubstr("le=\"0.1\"} 1\n"));
  // Not shortened past what reads back as the same double.
  EXPECT_THAT(text, HasSubstr("ddo_rpc_duration_seconds_sum{method=\"Attach\"} 0.30000000000000004\n"));

  EXPECT_EQ(PrometheusFloat(0), "0");
  EXPECT_EQ(PrometheusFloat(1234567.125), "1234567.125");
  EXPECT_EQ(PrometheusFloat(1e21), "1e+21");
  EXPECT_EQ(PrometheusFloat(5e-324), "5e-324");
  EXPECT_EQ(PrometheusFloat(-0.5), "-0.5");
  EXPECT_EQ(PrometheusFloat(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(PrometheusFloat(-std::numeric_limits<double>::infinity()), "-Inf");
  EXPECT_EQ(PrometheusFloat(std::nan("")), "NaN");
  for (double value : {2.2582494020000001, 0.1, 1.0 / 3, 6.02214076e23, 1e-7}) {
    EXPECT_EQ(std::stod(PrometheusFloat(value)), value) << PrometheusFloat(value);
  }
}

}  // namespace
}  // namespace ddo
