#include "daemon/ctl/top_view.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "daemon/common/format_bytes.h"
#include "daemon/ctl/formatting.h"
#include "ddo/wire/display_text.h"

namespace ddo {
namespace {

// Per second between the two snapshots; nullopt without an earlier one (or no time between).
std::optional<double> Rate(uint64_t now, uint64_t before, absl::Duration elapsed) {
  const double seconds = absl::ToDoubleSeconds(elapsed);
  if (seconds <= 0 || now < before) return std::nullopt;
  return static_cast<double>(now - before) / seconds;
}

std::string Gbps(std::optional<double> bytes_per_second) {
  if (!bytes_per_second) return "-";
  return *bytes_per_second >= 1e9 ? absl::StrFormat("%.1f GB/s", *bytes_per_second / 1e9)
                                  : absl::StrFormat("%.1f MB/s", *bytes_per_second / 1e6);
}

using ComponentList = std::vector<const ddo::v1::ComponentInfo*>;

// The daemon line, the pool line and the streaming line (rates need an earlier snapshot).
void AppendTopHeader(const ddo::v1::DaemonInfo& info, const TopSnapshot& now,
                     const std::optional<TopSnapshot>& before, absl::Duration elapsed,
                     std::string* out) {
  const ddo::v1::Stats& stats = now.stats;
  const ddo::v1::PoolStats& pool = stats.pool();
  const ddo::v1::StreamTotals& stream = stats.stream();
  *out =
      absl::StrFormat("ddod %s (%s), up %s: %u lease(s), %u session(s)\n",
                      EscapeForDisplay(info.version()), EscapeForDisplay(info.effective_preset()),
                      FormatDuration(stats.uptime_seconds()), stats.leases(), stats.sessions());
  absl::StrAppend(out, "pool      ", FormatBytes(pool.used_bytes()), " in ", pool.components(),
                  " component(s), ", FormatBytes(pool.reserved_bytes()), " reserved of ",
                  FormatBytes(pool.budget_bytes()), ", ", FormatBytes(pool.pinned_bytes()),
                  " pinned, ", pool.evictions(), " eviction(s)",
                  pool.file_bytes() > 0
                      ? absl::StrCat("; files ", FormatBytes(pool.file_bytes()), " (",
                                     pool.backing_files(), " backing file(s))")
                      : std::string(),
                  pool.outside_bytes() > 0
                      ? absl::StrCat("; ", FormatBytes(pool.outside_bytes()),
                                     " held by ddod and runners")
                      : std::string(),
                  "\n");
  std::optional<double> rate, waits;
  if (before) {
    rate = Rate(stream.bytes_streamed(), before->stats.stream().bytes_streamed(), elapsed);
    waits = Rate(stream.runner_waits(), before->stats.stream().runner_waits(), elapsed);
  }
  absl::StrAppend(out, "streaming ", Gbps(rate), " now, ", FormatBytes(stream.bytes_streamed()),
                  " since start; runner stalls ",
                  waits ? absl::StrFormat("%.1f/s", *waits) : std::string("-"), " (",
                  stream.runner_waits(), " in all); warm slabs ", stream.warm_slab_hits(), " hit, ",
                  stream.warm_slab_misses(), " missed",
                  stream.file_bytes_read() > 0
                      ? absl::StrCat("; read from files ", FormatBytes(stream.file_bytes_read()),
                                     ", staging waits ", stream.staging_waits())
                      : std::string(),
                  "\n\n");
}

// One row per session, with its rate since the earlier snapshot.
void AppendSessionRows(const TopSnapshot& now, const std::optional<TopSnapshot>& before,
                       absl::Duration elapsed, std::string* out) {
  std::map<std::string, uint64_t> streamed_before;
  if (before) {
    for (const auto& session : before->sessions.sessions()) {
      streamed_before[session.session_id()] = session.streamed_bytes();
    }
  }
  absl::StrAppend(out,
                  absl::StrFormat("%-9s %-8s %-32s %-14s %10s %10s %10s %9s\n", "SESSION", "PID",
                                  "COMPONENT", "DEVICE", "RATE", "STREAMED", "RESIDENT", "UNITS"));
  for (const auto& session : now.sessions.sessions()) {
    std::optional<double> session_rate;
    if (auto it = streamed_before.find(session.session_id()); it != streamed_before.end()) {
      session_rate = Rate(session.streamed_bytes(), it->second, elapsed);
    }
    const std::string device = session.device_uuid().empty() ? "host" : session.device_uuid();
    absl::StrAppend(
        out,
        absl::StrFormat("%-9s %-8d %-32s %-14s %10s %10s %10s %9u\n",
                        EscapeForDisplay(session.session_id().substr(0, 8)), session.client_pid(),
                        EscapeForDisplay(session.cache_key(), 32), EscapeForDisplay(device, 14),
                        Gbps(session_rate), FormatBytes(session.streamed_bytes()),
                        FormatBytes(session.resident_bytes()), session.schedule_length()));
  }
  if (now.sessions.sessions().empty()) absl::StrAppend(out, "(no session)\n");
}

// One row per component, largest first (`components` sorted so).
void AppendComponentRows(const ComponentList& components, std::string* out) {
  absl::StrAppend(out, "\n",
                  absl::StrFormat("%-40s %10s %8s %10s %10s\n", "COMPONENT", "OWN", "SESSIONS",
                                  "PINNED", "KEEP-ALIVE"));
  for (const auto* component : components) {
    const int64_t keep = component->keep_alive_seconds();
    absl::StrAppend(out, absl::StrFormat("%-40s %10s %8u %10s %10s\n",
                                         EscapeForDisplay(component->ref().cache_key(), 40),
                                         FormatBytes(component->own_bytes()), component->sessions(),
                                         FormatBytes(component->pinned_bytes()),
                                         keep < 0    ? std::string("never")
                                         : keep == 0 ? std::string("default")
                                                     : FormatDuration(keep)));
  }
  if (components.empty()) absl::StrAppend(out, "(the pool is empty)\n");
}

// The pool per user: the owners ddod shows the caller (its own; everyone's to an admin).
void AppendPoolByUser(const ComponentList& components, std::string* out) {
  std::map<std::string, std::pair<uint64_t, int>> by_user;  // bytes, components
  for (const auto* component : components) {
    const std::string user = component->owner_shown()
                                 ? absl::StrCat("uid ", component->owner_uid())
                                 : std::string("other users (shared with you)");
    by_user[user].first += component->own_bytes();
    by_user[user].second += 1;
  }
  if (!by_user.empty()) absl::StrAppend(out, "\npool by user:");
  for (const auto& [user, use] : by_user) {
    absl::StrAppend(out, "  ", user, " ", FormatBytes(use.first), " (", use.second, ")");
  }
  if (!by_user.empty()) absl::StrAppend(out, "\n");
}

}  // namespace

std::string FormatTop(const ddo::v1::DaemonInfo& info, const TopSnapshot& now,
                      const std::optional<TopSnapshot>& before) {
  const absl::Duration elapsed = before ? now.taken - before->taken : absl::ZeroDuration();
  std::string out;
  AppendTopHeader(info, now, before, elapsed, &out);
  AppendSessionRows(now, before, elapsed, &out);
  ComponentList components;
  for (const auto& component : now.components.components()) components.push_back(&component);
  std::sort(components.begin(), components.end(), [](const auto* a, const auto* b) {
    return a->own_bytes() > b->own_bytes();
  });
  AppendComponentRows(components, &out);
  AppendPoolByUser(components, &out);
  return out;
}

}  // namespace ddo
