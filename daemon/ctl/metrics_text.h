// File: daemon/ctl/metrics_text.h
//
// `ddoctl metrics`: ddod's counters in the Prometheus text exposition format (version 0.0.4),
// for node_exporter's textfile collector (`ddoctl metrics > /var/lib/node_exporter/ddo.prom`)
// or any scraper that runs a command. Every name starts with `ddo_`; counters end in `_total`;
// RPC latencies are one histogram per method (`ddo_rpc_duration_seconds`). Values and `le`
// bounds are written in their shortest round-trip form (2.258249402, not 2.2582494020000001).
//
// Thread-safety: pure functions; callable from any thread.
#ifndef DDO_DAEMON_CTL_METRICS_TEXT_H_
#define DDO_DAEMON_CTL_METRICS_TEXT_H_

#include <string>

#include "ddo/v1/info.pb.h"
#include "ddo/v1/stats.pb.h"

namespace ddo {

// A sample value or `le` bound of the text format: the fewest digits that parse back as the
// same double (std::to_chars), and +Inf, -Inf, NaN as the format spells them.
std::string PrometheusFloat(double value);

std::string FormatMetrics(const ddo::v1::DaemonInfo& info, const ddo::v1::Stats& stats);

}  // namespace ddo

#endif  // DDO_DAEMON_CTL_METRICS_TEXT_H_
