// File: daemon/ctl/formatting.h
//
// What ddoctl prints for people. Pure functions of the messages, so tests pin the output.
//
// Thread-safety: pure functions; callable from any thread.
#ifndef DDO_DAEMON_CTL_FORMATTING_H_
#define DDO_DAEMON_CTL_FORMATTING_H_

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>

#include "daemon/common/format_bytes.h"
#include "ddo/v1/components.pb.h"
#include "ddo/v1/info.pb.h"
#include "ddo/v1/profiles.pb.h"
#include "ddo/v1/sessions.pb.h"
#include "ddo/v1/settings.pb.h"
#include "ddo/v1/stats.pb.h"

namespace ddo {


// "3h 02m", "4m 10s", "12.3s".
std::string FormatDuration(double seconds);

std::string FormatStatus(const ddo::v1::DaemonInfo& info, const std::string& health);
std::string FormatPresetList(const ddo::v1::ListPresetsResponse& presets);
// The preset `name` names (any case, or an alias of one); nullptr when none.
const ddo::v1::Preset* FindPreset(const ddo::v1::ListPresetsResponse& presets,
                                  const std::string& name);
// The text for a `name` that is neither a preset nor an alias: the names there are.
std::string NoSuchPreset(const ddo::v1::ListPresetsResponse& presets, const std::string& name);
// One preset's variables; NotFound text when `name` is neither a preset nor an alias.
std::string FormatPreset(const ddo::v1::ListPresetsResponse& presets, const std::string& name,
                         bool* found);
std::string FormatStats(const ddo::v1::Stats& stats);
// A plan: route, sizes, and every decision with its reason.
std::string FormatPlan(const ddo::v1::PlanExplanation& plan);

// The resolved settings, one line per setting with its source; per-component blocks after.
std::string FormatSettings(const ddo::v1::ResolvedSettings& settings);

std::string FormatSessions(const ddo::v1::ListSessionsResponse& sessions);
// One row per component: key, state, size, pinned, sessions, last use.
// `viewer`: the uid listing; another owner's key is shown with its uid and user name.
std::string FormatComponents(const ddo::v1::ListComponentsResponse& components,
                             std::optional<uid_t> viewer = std::nullopt);

// `ddoctl profiles list`: a line per profile (key, name, update time, capacity limits,
// observations, recommendation); `show` prints the stored JSON as it is.
std::string FormatProfiles(const ddo::v1::ListProfilesResponse& profiles, const std::string& dir);

}  // namespace ddo

#endif  // DDO_DAEMON_CTL_FORMATTING_H_
