// ddoctl's read-only commands: status, presets, settings, plan, stats, metrics, sessions and
// components. Each asks ddod and prints the answer as text or, with --json, as JSON.
#include <unistd.h>

#include <cstdio>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "daemon/config/environment.h"
#include "daemon/ctl/commands.h"
#include "daemon/ctl/formatting.h"
#include "daemon/ctl/json_output.h"
#include "daemon/ctl/layout_file.h"
#include "daemon/ctl/metrics_text.h"

namespace ddo {
namespace {

using Stub = ddo::v1::Ddo::Stub;

// `ddoctl presets NAME --json`: the one preset, or the names there are on stderr.
int PrintPresetJson(const CtlArgs& args, const ddo::v1::ListPresetsResponse& presets) {
  const google::protobuf::Message* answer = &presets;
  if (!args.operands.empty()) {
    answer = FindPreset(presets, args.operands.front());
    if (answer == nullptr) {
      std::fputs(NoSuchPreset(presets, args.operands.front()).c_str(), stderr);
      return kCtlExitUsage;
    }
  }
  std::fputs(CtlJson(*answer).c_str(), stdout);
  std::fputs("\n", stdout);
  return kCtlExitOk;
}

// Adds `settings`' operands (preset=NAME, component=NAME, DDO_X=VALUE) to the request; a
// usage error names the first operand that is none of them.
std::optional<std::string> AddSettingsOperands(const CtlArgs& args,
                                               ddo::v1::ResolveSettingsRequest* request) {
  for (const std::string& operand : args.operands) {
    const size_t equals = operand.find('=');
    if (equals == std::string::npos || equals == 0) {
      return absl::StrCat("settings takes preset=NAME, component=NAME or DDO_X=VALUE, not '",
                          operand, "'");
    }
    const std::string key = operand.substr(0, equals);
    const std::string value = operand.substr(equals + 1);
    if (key == "preset") {
      request->set_preset(value);
    } else if (key == "component") {
      request->add_components(value);
    } else {
      (*request->mutable_overrides())[key] = value;
    }
  }
  return std::nullopt;
}

// `ddoctl plan --explain LAYOUT.json [DDO_X=VALUE ...]`: the file's request with the shell's
// DDO_* settings, then the command line's, over the file's; the usage problem otherwise.
absl::StatusOr<ddo::v1::ExplainPlanRequest> PlanRequestOf(const CtlArgs& args) {
  absl::StatusOr<ddo::v1::ExplainPlanRequest> request = ReadLayoutFile(args.operands[1]);
  if (!request.ok()) return request;
  for (const auto& [name, value] : ProcessEnvironment()) {
    if (name.rfind("DDO_", 0) == 0 && name != "DDO_DAEMON") {
      (*request->mutable_settings())[name] = value;
    }
  }
  for (size_t i = 2; i < args.operands.size(); ++i) {
    const std::string& operand = args.operands[i];
    const size_t equals = operand.find('=');
    if (equals == std::string::npos || equals == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("plan settings are DDO_X=VALUE, not '", operand, "'"));
    }
    (*request->mutable_settings())[operand.substr(0, equals)] = operand.substr(equals + 1);
  }
  return request;
}

}  // namespace

int RunStatusCommand(const CtlArgs& args, CtlConnection& connection) {
  ddo::v1::DaemonInfo info;
  if (auto status = CallDaemon(connection, &Stub::GetInfo, ddo::v1::GetInfoRequest(), &info);
      !status.ok()) {
    return CtlRpcFailed("GetInfo", status);
  }
  if (args.json) {
    const nlohmann::json answer = {{"health", connection.health()},
                                   {"info", MessageToPlainJson(info)}};
    std::printf("%s\n", DumpCtlJson(answer).c_str());
  } else {
    std::fputs(FormatStatus(info, connection.health()).c_str(), stdout);
  }
  return kCtlExitOk;
}

int RunPresetsCommand(const CtlArgs& args, CtlConnection& connection) {
  ddo::v1::ListPresetsResponse presets;
  if (auto status =
          CallDaemon(connection, &Stub::ListPresets, ddo::v1::ListPresetsRequest(), &presets);
      !status.ok()) {
    return CtlRpcFailed("ListPresets", status);
  }
  if (args.json) return PrintPresetJson(args, presets);
  if (args.operands.empty()) {
    std::fputs(FormatPresetList(presets).c_str(), stdout);
    return kCtlExitOk;
  }
  bool found = false;
  const std::string text = FormatPreset(presets, args.operands.front(), &found);
  std::fputs(text.c_str(), found ? stdout : stderr);
  return found ? kCtlExitOk : kCtlExitUsage;
}

int RunSettingsCommand(const CtlArgs& args, CtlConnection& connection) {
  ddo::v1::ResolveSettingsRequest request;
  if (std::optional<std::string> problem = AddSettingsOperands(args, &request)) {
    return CtlUsage(*problem);
  }
  for (const auto& [name, value] : ProcessEnvironment()) {
    if (name.rfind("DDO_", 0) == 0) (*request.mutable_environment())[name] = value;
  }
  ddo::v1::ResolvedSettings resolved;
  if (auto status = CallDaemon(connection, &Stub::ResolveSettings, request, &resolved);
      !status.ok()) {
    return CtlRpcFailed("ResolveSettings", status);
  }
  std::fputs(args.json ? CtlJson(resolved).c_str() : FormatSettings(resolved).c_str(), stdout);
  return kCtlExitOk;
}

int RunPlanCommand(const CtlArgs& args, CtlConnection& connection) {
  if (args.operands.size() < 2 || args.operands[0] != "--explain") {
    return CtlUsage("plan takes --explain LAYOUT.json [DDO_X=VALUE ...]");
  }
  absl::StatusOr<ddo::v1::ExplainPlanRequest> request = PlanRequestOf(args);
  if (!request.ok()) return CtlUsage(std::string(request.status().message()));
  ddo::v1::PlanExplanation plan;
  if (auto status = CallDaemon(connection, &Stub::ExplainPlan, *request, &plan); !status.ok()) {
    return CtlRpcFailed("ExplainPlan", status);
  }
  std::fputs(args.json ? CtlJson(plan).c_str() : FormatPlan(plan).c_str(), stdout);
  return kCtlExitOk;
}

int RunStatsCommand(const CtlArgs& args, CtlConnection& connection) {
  ddo::v1::Stats stats;
  if (auto status = CallDaemon(connection, &Stub::GetStats, ddo::v1::GetStatsRequest(), &stats);
      !status.ok()) {
    return CtlRpcFailed("GetStats", status);
  }
  std::fputs(args.json ? (CtlJson(stats) + "\n").c_str() : FormatStats(stats).c_str(), stdout);
  return kCtlExitOk;
}

int RunMetricsCommand(const CtlArgs& /*args*/, CtlConnection& connection) {
  ddo::v1::DaemonInfo info;
  if (auto status = CallDaemon(connection, &Stub::GetInfo, ddo::v1::GetInfoRequest(), &info);
      !status.ok()) {
    return CtlRpcFailed("GetInfo", status);
  }
  ddo::v1::Stats stats;
  if (auto status = CallDaemon(connection, &Stub::GetStats, ddo::v1::GetStatsRequest(), &stats);
      !status.ok()) {
    return CtlRpcFailed("GetStats", status);
  }
  std::fputs(FormatMetrics(info, stats).c_str(), stdout);
  return kCtlExitOk;
}

int RunSessionsCommand(const CtlArgs& args, CtlConnection& connection) {
  ddo::v1::ListSessionsResponse sessions;
  if (auto status =
          CallDaemon(connection, &Stub::ListSessions, ddo::v1::ListSessionsRequest(), &sessions);
      !status.ok()) {
    return CtlRpcFailed("ListSessions", status);
  }
  std::fputs(args.json ? (CtlJson(sessions) + "\n").c_str() : FormatSessions(sessions).c_str(),
             stdout);
  return kCtlExitOk;
}

int RunComponentsCommand(const CtlArgs& args, CtlConnection& connection) {
  ddo::v1::ListComponentsResponse components;
  if (auto status = CallDaemon(connection, &Stub::ListComponents, ddo::v1::ListComponentsRequest(),
                               &components);
      !status.ok()) {
    return CtlRpcFailed("ListComponents", status);
  }
  std::fputs(args.json ? (CtlJson(components) + "\n").c_str()
                       : FormatComponents(components, ::getuid()).c_str(),
             stdout);
  return kCtlExitOk;
}

}  // namespace ddo
