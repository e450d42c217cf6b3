#include "daemon/ctl/formatting.h"

#include <pwd.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "ddo/wire/display_text.h"
#include "nlohmann/json.hpp"
#include "absl/time/time.h"

namespace ddo {
namespace {

// What a client named (keys, client names, profile names) is shown escaped and bounded: a
// terminal escape sequence in another user's cache key never reaches this terminal.
std::string Shown(const std::string& text) { return EscapeForDisplay(text, 160); }

std::string BackendName(ddo::v1::Backend backend) {
  switch (backend) {
    case ddo::v1::BACKEND_CUDA:
      return "cuda";
    case ddo::v1::BACKEND_HOST:
      return "host";
    default:
      return "unknown";
  }
}

std::string OsName(ddo::v1::OsKind os) {
  switch (os) {
    case ddo::v1::OS_KIND_LINUX:
      return "Linux";
    case ddo::v1::OS_KIND_WSL:
      return "WSL";
    case ddo::v1::OS_KIND_WINDOWS:
      return "Windows";
    default:
      return "unknown OS";
  }
}

// "  label        value\n"
std::string Row(absl::string_view label, absl::string_view value) {
  return absl::StrFormat("  %-12s %s\n", label, value);
}

}  // namespace

std::string FormatDuration(double seconds) {
  if (seconds < 60) return absl::StrFormat("%.1fs", seconds);
  const int64_t whole = static_cast<int64_t>(std::floor(seconds));
  if (whole < 3600) return absl::StrFormat("%dm %02ds", whole / 60, whole % 60);
  if (whole < 86400) return absl::StrFormat("%dh %02dm", whole / 3600, (whole % 3600) / 60);
  return absl::StrFormat("%dd %02dh", whole / 86400, (whole % 86400) / 3600);
}

std::string FormatStatus(const ddo::v1::DaemonInfo& info, const std::string& health) {
  std::string out = absl::StrFormat("ddod %s (%s), pid %d, up %s: %s\n", info.version(),
                                    info.api_version(), info.pid(),
                                    FormatDuration(info.uptime_seconds()), health);
  for (const std::string& address : info.listen_addresses()) {
    out += Row("address", address);
  }
  if (info.embedded()) {
    out += Row("embedded", absl::StrCat("yes, exits with pid ", info.parent_pid()));
  }
  out += Row("preset", info.requested_preset() == info.effective_preset()
                           ? info.effective_preset()
                           : absl::StrCat(info.requested_preset(), " -> ",
                                          info.effective_preset()));
  const auto& platform = info.platform();
  out += Row("platform", absl::StrFormat("%s %s on %s, %d CPUs", OsName(platform.os()),
                                         platform.os_release(), platform.hostname(),
                                         platform.cpu_count()));
  out += Row("RAM", absl::StrCat(FormatBytes(platform.ram_total_bytes()), " total, ",
                                 FormatBytes(platform.ram_available_bytes()), " available",
                                 platform.ram_available_overridden() ? " (overridden)" : "",
                                 ", pool budget ", FormatBytes(info.ram_budget_bytes()),
                                 info.ram_budget_counts_runners()
                                     ? " (with ddod and its runners: --ram-budget-scope runners)"
                                     : ""));
  out += Row("backend", absl::StrCat(BackendName(info.backend()), ": ", info.backend_detail()));
  out += Row("state dir", info.state_dir());
  if (info.devices().empty()) {
    out += Row("devices", "none");
  }
  for (const auto& device : info.devices()) {
    out += absl::StrFormat("  device %d    %s  %s\n", device.ordinal(), device.name(),
                           device.uuid());
    out += absl::StrFormat("               %s total, %s free, budget %s, sm %s, pci %s\n",
                           FormatBytes(device.total_bytes()), FormatBytes(device.free_bytes()),
                           FormatBytes(device.vram_budget_bytes()), device.compute_capability(),
                           device.pci_bus_id());
    if (device.h2d_gbps() > 0) {
      out += absl::StrFormat("               pinned host-to-device %.1f GB/s\n", device.h2d_gbps());
    }
  }
  return out;
}

std::string FormatPresetList(const ddo::v1::ListPresetsResponse& presets) {
  size_t width = 0;
  for (const auto& preset : presets.presets()) width = std::max(width, preset.name().size());
  std::string out;
  for (const auto& preset : presets.presets()) {
    const bool current = preset.name() == presets.daemon_preset();
    out += absl::StrFormat("%s %-*s  %s\n", current ? "*" : " ", static_cast<int>(width),
                           preset.name(), preset.description());
  }
  // Sorted for stable output (protobuf maps have no order).
  std::map<std::string, std::string> aliases(presets.aliases().begin(), presets.aliases().end());
  for (const auto& [alias, target] : aliases) {
    out += absl::StrFormat("  %-*s  alias of %s\n", static_cast<int>(width), alias, target);
  }
  out += "\n* = ddod's own preset. `ddoctl presets NAME` shows a preset's variables.\n";
  return out;
}

const ddo::v1::Preset* FindPreset(const ddo::v1::ListPresetsResponse& presets,
                                  const std::string& name) {
  std::string wanted = absl::AsciiStrToLower(name);
  if (auto alias = presets.aliases().find(wanted); alias != presets.aliases().end()) {
    wanted = alias->second;
  }
  for (const auto& preset : presets.presets()) {
    if (preset.name() == wanted) return &preset;
  }
  return nullptr;
}

std::string NoSuchPreset(const ddo::v1::ListPresetsResponse& presets, const std::string& name) {
  std::string names;
  for (const auto& preset : presets.presets()) absl::StrAppend(&names, " ", preset.name());
  return absl::StrCat("no preset named '", ddo::EscapeForDisplay(name), "'; presets:", names, "\n");
}

std::string FormatPreset(const ddo::v1::ListPresetsResponse& presets, const std::string& name,
                         bool* found) {
  const ddo::v1::Preset* preset = FindPreset(presets, name);
  *found = preset != nullptr;
  if (preset == nullptr) return NoSuchPreset(presets, name);
  std::string out = absl::StrCat(preset->name(), ": ", preset->description(), "\n");
  std::map<std::string, std::string> values(preset->values().begin(), preset->values().end());
  size_t width = 0;
  for (const auto& [variable, value] : values) width = std::max(width, variable.size());
  for (const auto& [variable, value] : values) {
    out += absl::StrFormat("  %-*s  %s\n", static_cast<int>(width), variable, value);
  }
  return out;
}

std::string FormatStats(const ddo::v1::Stats& stats) {
  std::string out = absl::StrFormat("up %s, %d leases, %d sessions\n",
                                    FormatDuration(stats.uptime_seconds()), stats.leases(),
                                    stats.sessions());
  const auto& pool = stats.pool();
  out += absl::StrFormat("pool: budget %s, reserved %s in %d segments, pinned %s, used %s\n",
                         FormatBytes(pool.budget_bytes()), FormatBytes(pool.reserved_bytes()),
                         pool.segments(), FormatBytes(pool.pinned_bytes()),
                         FormatBytes(pool.used_bytes()));
  out += absl::StrFormat("      %d components, %d adopted at start, %d evicted to make room\n",
                         pool.components(), pool.adopted(), pool.evictions());
  if (pool.outside_bytes() > 0) {
    out += absl::StrFormat(
        "      %s of the budget held by ddod and its runners outside the pool (%s left for "
        "the pool)\n",
        FormatBytes(pool.outside_bytes()),
        FormatBytes(pool.budget_bytes() - std::min(pool.outside_bytes(), pool.budget_bytes())));
  }
  if (pool.file_bytes() > 0 || pool.held_bytes() > 0) {
    out += absl::StrFormat(
        "      %s on the file tier in %d backing file(s); %s held outside segments "
        "(host sessions, staging)\n",
        FormatBytes(pool.file_bytes()), pool.backing_files(), FormatBytes(pool.held_bytes()));
  }
  if (pool.spilled_bytes() > 0) {
    out += absl::StrFormat("      %s of uploads spilled to disk (they go there, not away, "
                           "when the pool needs room)\n",
                           FormatBytes(pool.spilled_bytes()));
  }
  if (pool.prefaulted_bytes() > 0) {
    out += absl::StrFormat("      %s pre-faulted for the next load (%s), given back to "
                           "anything that needs room\n",
                           FormatBytes(pool.prefaulted_bytes()),
                           pool.prefaulted_ready_bytes() > 0 ? "ready" : "being made");
  }
  if (!stats.rpcs().empty()) {
    out += absl::StrFormat("%-20s %10s %10s\n", "rpc", "ok", "failed");
    for (const auto& rpc : stats.rpcs()) {
      out += absl::StrFormat("%-20s %10d %10d\n", rpc.method(), rpc.ok(), rpc.failed());
    }
  }
  return out;
}

std::string FormatComponents(const ddo::v1::ListComponentsResponse& components,
                             std::optional<uid_t> viewer) {
  if (components.components().empty()) {
    return "no components in the pool\n";
  }
  // Keys are names inside their owner's uid: beside another user's key, whose it is (the
  // administrator's listing has everyone's).
  auto shown_key = [&](const ddo::v1::ComponentInfo& component) {
    std::string key = Shown(component.ref().cache_key());
    if (component.owner_shown() && viewer.has_value() && component.owner_uid() != *viewer) {
      const struct passwd* user = ::getpwuid(component.owner_uid());
      absl::StrAppend(&key, " (uid ", component.owner_uid(),
                      user != nullptr ? absl::StrCat(" ", Shown(user->pw_name)) : "", ")");
    }
    return key;
  };
  size_t width = 3;
  for (const auto& component : components.components()) {
    width = std::max(width, shown_key(component).size());
  }
  std::string out = absl::StrFormat("%-*s  %-9s %10s  %-6s %8s  %s\n", static_cast<int>(width),
                                    "key", "state", "size", "pinned", "sessions", "last use");
  for (const auto& component : components.components()) {
    const bool ready = component.state() == ddo::v1::COMPONENT_STATE_READY;
    out += absl::StrFormat(
        "%-*s  %-9s %10s  %-6s %8d  %s\n", static_cast<int>(width), shown_key(component),
        ready ? "ready" : "uploading", FormatBytes(component.ref().total_bytes()),
        component.pinned() ? "yes" : "no", component.sessions(),
        absl::FormatTime("%Y-%m-%d %H:%M:%S", absl::FromUnixMillis(component.last_used_unix_ms()),
                         absl::LocalTimeZone()));
    if (component.tier() == ddo::v1::COMPONENT_TIER_FILE) {
      out += absl::StrFormat("%-*s  on the file tier: read from its files as it streams\n",
                             static_cast<int>(width), "");
    } else if (component.tier() == ddo::v1::COMPONENT_TIER_SPLIT) {
      out += absl::StrFormat("%-*s  split: %s in the pool, %s read from its files as it streams\n",
                             static_cast<int>(width), "", FormatBytes(component.pool_bytes()),
                             FormatBytes(component.file_bytes()));
    }
    if (!component.base_cache_key().empty()) {
      out += absl::StrFormat("%-*s  derived from %s, %d changed tensor%s, %s own\n",
                             static_cast<int>(width), "", Shown(component.base_cache_key()),
                             component.changed_tensors(),
                             component.changed_tensors() == 1 ? "" : "s",
                             FormatBytes(component.own_bytes()));
    }
  }
  return out;
}

namespace {

const char* SourceWord(ddo::v1::SettingSource source) {
  switch (source) {
    case ddo::v1::SETTING_SOURCE_PRESET:
      return "preset";
    case ddo::v1::SETTING_SOURCE_DAEMON_FLAG:
      return "ddod's environment";
    case ddo::v1::SETTING_SOURCE_ENVIRONMENT:
      return "your environment";
    case ddo::v1::SETTING_SOURCE_REQUEST:
      return "override";
    case ddo::v1::SETTING_SOURCE_COMPONENT_POLICY:
      return "component policy";
    case ddo::v1::SETTING_SOURCE_PROFILE:
      return "profile";
    case ddo::v1::SETTING_SOURCE_PLATFORM:
      return "platform rule";
    default:
      return "default";
  }
}

void AppendSettingLines(const google::protobuf::RepeatedPtrField<ddo::v1::SettingValue>& values,
                        const std::string& indent, std::string* out) {
  size_t width = 0;
  for (const auto& value : values) width = std::max(width, value.name().size());
  for (const auto& value : values) {
    *out += absl::StrFormat("%s%-*s  %-12s  (%s)\n", indent, static_cast<int>(width), value.name(),
                            value.value().empty() ? "-" : value.value(), SourceWord(value.source()));
  }
}

}  // namespace

std::string FormatPlan(const ddo::v1::PlanExplanation& plan) {
  std::string out = absl::StrFormat("route: %s\n", plan.route());
  if (plan.route() == "ddo_stream") {
    out += absl::StrFormat("resident %s, streamed %s, up to %d units in flight\n",
                           FormatBytes(plan.resident_bytes()), FormatBytes(plan.streamed_bytes()),
                           plan.ring_slots());
  }
  for (const auto& [name, value] : plan.group_offload_args()) {
    out += absl::StrFormat("  apply_group_offloading %s=%s\n", name, value);
  }
  size_t width = 0;
  for (const auto& decision : plan.decisions()) width = std::max(width, decision.key().size());
  out += "decisions:\n";
  for (const auto& decision : plan.decisions()) {
    out += absl::StrFormat("  %-*s  %s", static_cast<int>(width), decision.key(), decision.value());
    if (!decision.reason().empty()) out += absl::StrFormat("  (%s)", decision.reason());
    out += "\n";
  }
  return out;
}

std::string FormatSettings(const ddo::v1::ResolvedSettings& settings) {
  std::string out;
  if (settings.requested_preset().empty()) {
    out += "preset: none (built-in defaults)\n";
  } else if (settings.requested_preset() == settings.effective_preset()) {
    out += absl::StrFormat("preset: %s\n", settings.effective_preset());
  } else {
    out += absl::StrFormat("preset: %s -> %s\n", settings.requested_preset(),
                           settings.effective_preset());
  }
  AppendSettingLines(settings.values(), "  ", &out);
  for (const auto& component : settings.components()) {
    out += absl::StrFormat("component %s\n", component.component());
    AppendSettingLines(component.values(), "  ", &out);
  }
  return out;
}

std::string FormatSessions(const ddo::v1::ListSessionsResponse& sessions) {
  std::string out = absl::StrFormat("%d leases, %d sessions\n", sessions.leases_size(),
                                    sessions.sessions_size());
  for (const auto& lease : sessions.leases()) {
    out += absl::StrFormat("  lease %s  pid %-8d %s  since %s\n", lease.lease_id().substr(0, 8),
                           lease.client_pid(), Shown(lease.client_name()),
                           absl::FormatTime("%H:%M:%S", absl::FromUnixMillis(lease.connected_unix_ms()),
                                            absl::LocalTimeZone()));
  }
  for (const auto& session : sessions.sessions()) {
    out += absl::StrFormat("  session %s  pid %-8d %s on %s\n", session.session_id().substr(0, 8),
                           session.client_pid(), Shown(session.cache_key()),
                           session.device_uuid().empty() ? "host" : session.device_uuid());
    if (session.device_uuid().empty()) continue;
    // A streaming session: where its bytes are and how the stream goes.
    out += absl::StrFormat(
        "           device %s (resident %s, up to %d units in flight), schedule %s\n",
        FormatBytes(session.device_bytes()), FormatBytes(session.resident_bytes()),
        session.ring_slots(),
        session.schedule_length() == 0 ? std::string("not known yet")
                                       : absl::StrCat(session.schedule_length(), " uses/cycle"));
    out += absl::StrFormat(
        "           streamed %s in %d uses (%d consumed, %d skipped), %d out of schedule\n",
        FormatBytes(session.streamed_bytes()), session.produced_uses(), session.consumed_uses(),
        session.skipped_uses(), session.out_of_schedule_uses());
  }
  return out;
}

std::string FormatProfiles(const ddo::v1::ListProfilesResponse& profiles, const std::string& dir) {
  if (profiles.profiles().empty()) return absl::StrFormat("no profiles in %s\n", dir);
  std::string out = absl::StrFormat("%d profile%s in %s\n", profiles.profiles_size(),
                                    profiles.profiles_size() == 1 ? "" : "s", dir);
  for (const auto& profile : profiles.profiles()) {
    const nlohmann::json record = nlohmann::json::parse(profile.json(), nullptr, false);
    std::string limits;
    if (record.is_object() && record.contains("capacity_limits") && record["capacity_limits"].is_object()) {
      for (const auto& [metric, limit] : record["capacity_limits"].items()) {
        std::string text = metric;
        if (limit.contains("max_success")) absl::StrAppend(&text, " ok<=", limit["max_success"].dump());
        if (limit.contains("min_failure")) absl::StrAppend(&text, " oom>=", limit["min_failure"].dump());
        absl::StrAppend(&limits, limits.empty() ? "" : ", ", text);
      }
    }
    const size_t observations =
        record.is_object() && record.contains("observations") && record["observations"].is_array()
            ? record["observations"].size()
            : 0;
    std::string recommendation;
    if (record.is_object() && record.contains("recommendation") && record["recommendation"].is_object()) {
      for (const auto& [key, value] : record["recommendation"].items()) {
        absl::StrAppend(&recommendation, recommendation.empty() ? "" : ", ", key, "=", value.dump());
      }
    }
    out += absl::StrFormat("  %s  %-20s  updated %s\n", Shown(profile.ref().key()),
                           profile.ref().name().empty() ? "(capacity)" : Shown(profile.ref().name()),
                           record.is_object() && record.contains("updated_at") &&
                                   record["updated_at"].is_string()
                               ? record["updated_at"].get<std::string>()
                               : std::string("?"));
    out += absl::StrFormat("      limits: %s; %d observation%s%s\n", limits.empty() ? "none" : limits,
                           observations, observations == 1 ? "" : "s",
                           recommendation.empty() ? "" : absl::StrCat("; recommends ", recommendation));
  }
  return out;
}

}  // namespace ddo
