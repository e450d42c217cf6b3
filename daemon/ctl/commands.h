// File: daemon/ctl/commands.h
//
// ddoctl's commands: one function each, run against an open connection, printing the answer
// (text, or JSON with --json) and returning ddoctl's exit status (command_support.h).
// RunCtlCommand dispatches by name from one table; daemon/main/ddoctl_main.cc parses the
// command line, connects and calls it.
//
// Thread-safety: ddoctl is single-threaded; call these from its main thread only.
#ifndef DDO_DAEMON_CTL_COMMANDS_H_
#define DDO_DAEMON_CTL_COMMANDS_H_

#include <string>

#include "daemon/ctl/command_support.h"
#include "daemon/ctl/ctl_connection.h"

namespace ddo {

// Whether `name` is one of the commands in RunCtlCommand's table.
bool IsCtlCommand(const std::string& name);

// Runs args.command; a usage error for a name not in the table.
int RunCtlCommand(const CtlArgs& args, CtlConnection& connection);

// The commands, by the file that holds them.
// query_commands.cc: answers read from ddod, printed.
int RunStatusCommand(const CtlArgs& args, CtlConnection& connection);
int RunPresetsCommand(const CtlArgs& args, CtlConnection& connection);
int RunSettingsCommand(const CtlArgs& args, CtlConnection& connection);
int RunPlanCommand(const CtlArgs& args, CtlConnection& connection);
int RunStatsCommand(const CtlArgs& args, CtlConnection& connection);
int RunMetricsCommand(const CtlArgs& args, CtlConnection& connection);
int RunSessionsCommand(const CtlArgs& args, CtlConnection& connection);
int RunComponentsCommand(const CtlArgs& args, CtlConnection& connection);
// top_command.cc
int RunTopCommand(const CtlArgs& args, CtlConnection& connection);
// pool_commands.cc: `load` and `evict`, which change the pool.
int RunLoadCommand(const CtlArgs& args, CtlConnection& connection);
int RunEvictCommand(const CtlArgs& args, CtlConnection& connection);
// profile_commands.cc
int RunProfilesCommand(const CtlArgs& args, CtlConnection& connection);

}  // namespace ddo

#endif  // DDO_DAEMON_CTL_COMMANDS_H_
