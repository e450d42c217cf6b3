// File: daemon/ctl/top_view.h
//
// `ddoctl top`: one screen of what ddod is doing now, redrawn every interval: the pool, the
// streaming totals with the rates since the last screen (bytes streamed per second: the
// achieved host-to-device bandwidth; runner stalls per second), one row per streaming session
// with its own rate, and one row per component of the pool (largest first) with its bytes,
// sessions and keep-alive, and the pool per user (the owners ddod shows the caller). Rates
// need two snapshots: the first screen shows totals only.
//
// Thread-safety: a pure function of its snapshots; callable from any thread.
#ifndef DDO_DAEMON_CTL_TOP_VIEW_H_
#define DDO_DAEMON_CTL_TOP_VIEW_H_

#include <optional>
#include <string>

#include "absl/time/time.h"
#include "ddo/v1/components.pb.h"
#include "ddo/v1/info.pb.h"
#include "ddo/v1/sessions.pb.h"
#include "ddo/v1/stats.pb.h"

namespace ddo {

struct TopSnapshot {
  absl::Time taken;
  ddo::v1::Stats stats;
  ddo::v1::ListSessionsResponse sessions;
  ddo::v1::ListComponentsResponse components;
};

std::string FormatTop(const ddo::v1::DaemonInfo& info, const TopSnapshot& now,
                      const std::optional<TopSnapshot>& before);

}  // namespace ddo

#endif  // DDO_DAEMON_CTL_TOP_VIEW_H_
