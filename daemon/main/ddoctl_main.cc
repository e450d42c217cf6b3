// ddoctl: look at and manage a running ddod. See `ddoctl --help`. The command line and exit
// codes are here; the commands are daemon/ctl/commands.h's.
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "daemon/common/version.h"
#include "daemon/config/environment.h"
#include "daemon/config/paths.h"
#include "daemon/ctl/command_support.h"
#include "daemon/ctl/commands.h"
#include "daemon/ctl/ctl_connection.h"
#include "ddo/wire/daemon_address.h"

namespace {

using ddo::CtlArgs;
using ddo::CtlUsage;
using ddo::kCtlExitNoDaemon;
using ddo::kCtlExitOk;
using ddo::kCtlExitUsage;

constexpr char kUsage[] =
    "ddoctl: look at and manage a running ddod.\n\n"
    "usage: ddoctl [--daemon ADDR] [--timeout SECONDS] [--json] COMMAND [ARGS]\n\n"
    "commands:\n"
    "  status           daemon version, health, platform, RAM, devices\n"
    "  presets [NAME]   the preset table, or one preset's DDO_* values\n"
    "  settings [preset=NAME] [component=NAME ...] [DDO_X=VALUE ...]\n"
    "                   the DDO_* settings a runner with this shell's environment gets,\n"
    "                   each with its source (DDO_X=VALUE: explicit overrides)\n"
    "  plan --explain LAYOUT.json [DDO_X=VALUE ...]\n"
    "                   ddod's whole decision for a component layout (route, resident\n"
    "                   budget, units, ring), without loading weights\n"
    "  stats            uptime, leases, pool accounting, RPC counts\n"
    "  metrics          the same counters and more (bytes streamed, warm slab hits, RPC\n"
    "                   latencies) in the Prometheus text format, for node_exporter's\n"
    "                   textfile collector\n"
    "  sessions         connected clients (leases) and their sessions\n"
    "  top [-n COUNT] [SECONDS [COUNT]]\n"
    "                   a live view redrawn every SECONDS (1): pool, streaming bandwidth,\n"
    "                   stalls, warm slabs, each session's rate; COUNT screens, then exit\n"
    "                   (default: until interrupted on a terminal, else one, like\n"
    "                   `top -b -n 1`)\n"
    "  components       the components in the host pool\n"
    "  load KEY PATH... [keep-alive=30m|never] [file-tier=auto|never|prefer]\n"
    "                   preload safetensors files or a model folder into the pool under KEY\n"
    "                   (ddoctl opens them with your rights), with a progress bar; evicted\n"
    "                   after the keep-alive unused (default: ddod's --keep-alive); one the\n"
    "                   pool cannot hold stays in its files, read as it streams (file-tier)\n"
    "  evict KEY [owner=USER|UID]\n"
    "                   remove an unused component from the pool: yours, or (ddod's\n"
    "                   administrator only) the one USER holds under KEY; keys are names\n"
    "                   inside each user, as `ddoctl components` shows them\n"
    "  profiles [list]  capacity and workload profiles (DDO_PROFILE_DIR, else ~/.ddo/profiles)\n"
    "  profiles show KEY | profiles rm KEY\n"
    "                   one profile's stored JSON; delete it\n\n"
    "options:\n"
    "  --daemon ADDR    unix:/path, /path or host:port (default: DDO_DAEMON, else the\n"
    "                   user's socket, then /run/ddo/ddod.sock)\n"
    "  --timeout S      seconds to wait for each answer (default 5)\n"
    "  --json           print the daemon's answer as JSON\n"
    "  --version        ddoctl's version and protocol\n"
    "  -h, --help       this text\n\n"
    "exit status: 0 ok, 1 the daemon refused the request, 2 bad command line, 3 no daemon.\n";

}  // namespace

int main(int argc, char** argv) {
  CtlArgs args;
  std::vector<std::string> words(argv + 1, argv + argc);
  for (size_t i = 0; i < words.size(); ++i) {
    const std::string& word = words[i];
    auto next_word = [&]() -> std::optional<std::string> {
      if (i + 1 >= words.size()) return std::nullopt;
      return words[++i];
    };
    if (word == "--help" || word == "-h" || word == "help") {
      std::fputs(kUsage, stdout);
      return kCtlExitOk;
    } else if (word == "--version") {
      std::printf("ddoctl %s (protocol %s)\n", ddo::kVersion, ddo::kApiVersion);
      return kCtlExitOk;
    } else if (word == "--json") {
      args.json = true;
    } else if (word == "--daemon") {
      args.daemon = next_word();
      if (!args.daemon) return CtlUsage("--daemon needs an address");
    } else if (word == "--timeout") {
      auto text = next_word();
      if (!text || !absl::SimpleAtod(*text, &args.timeout_seconds) || args.timeout_seconds <= 0) {
        return CtlUsage("--timeout needs a number of seconds > 0");
      }
    } else if (word == "--explain" && args.command == "plan") {
      args.operands.push_back(word);  // plan's own option
    } else if (word.rfind("--", 0) == 0) {
      return CtlUsage(absl::StrCat("unknown option '", word, "'"));
    } else if (args.command.empty()) {
      args.command = word;
    } else {
      args.operands.push_back(word);
    }
  }
  if (args.command.empty()) {
    std::fputs(kUsage, stderr);  // nothing asked: the whole help
    return kCtlExitUsage;
  }
  if (!ddo::IsCtlCommand(args.command)) {
    return CtlUsage(absl::StrCat("unknown command '", args.command, "'"));
  }
  if (args.command == "presets" && args.operands.size() > 1) {
    return CtlUsage("presets takes at most one NAME");
  }

  const ddo::Environment env = ddo::ProcessEnvironment();
  const ddo::UserContext user = ddo::UserContext::FromProcess(env);
  auto targets = ddo::ResolveDaemonTargets(
      args.daemon.has_value() ? args.daemon : ddo::Lookup(env, "DDO_DAEMON"),
      ddo::SocketUserOf(user));
  if (!targets.ok()) {
    return CtlUsage(std::string(targets.status().message()));
  }
  if (targets->embedded) {
    return CtlUsage(
        "DDO_DAEMON=embedded names a client's private daemon, which ddoctl cannot reach; "
        "unset DDO_DAEMON or pass --daemon ADDR");
  }
  auto connection =
      ddo::CtlConnection::Open(*targets, absl::Seconds(args.timeout_seconds));
  if (!connection.ok()) {
    std::fprintf(stderr, "ddoctl: %s\n", std::string(connection.status().message()).c_str());
    return kCtlExitNoDaemon;
  }
  return ddo::RunCtlCommand(args, *connection);
}
