#include "daemon/ctl/commands.h"

#include "absl/strings/str_cat.h"

namespace ddo {
namespace {

using CommandFunction = int (*)(const CtlArgs&, CtlConnection&);

struct Command {
  const char* name;
  CommandFunction run;
};

constexpr Command kCommands[] = {
    {"status", RunStatusCommand},         {"presets", RunPresetsCommand},
    {"settings", RunSettingsCommand},     {"plan", RunPlanCommand},
    {"stats", RunStatsCommand},           {"metrics", RunMetricsCommand},
    {"sessions", RunSessionsCommand},     {"top", RunTopCommand},
    {"components", RunComponentsCommand}, {"load", RunLoadCommand},
    {"evict", RunEvictCommand},           {"profiles", RunProfilesCommand},
};

const Command* FindCommand(const std::string& name) {
  for (const Command& command : kCommands) {
    if (name == command.name) return &command;
  }
  return nullptr;
}

}  // namespace

bool IsCtlCommand(const std::string& name) { return FindCommand(name) != nullptr; }

int RunCtlCommand(const CtlArgs& args, CtlConnection& connection) {
  const Command* command = FindCommand(args.command);
  if (command == nullptr) return CtlUsage(absl::StrCat("unknown command '", args.command, "'"));
  return command->run(args, connection);
}

}  // namespace ddo
