// `ddoctl top [-n COUNT] [SECONDS [COUNT]]`: redraws ddoctl's view of ddod every SECONDS. On a
// terminal it runs until interrupted; piped or redirected, it prints one screen and exits, as
// `top -b -n 1` does, unless a COUNT says otherwise.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "daemon/ctl/commands.h"
#include "daemon/ctl/top_view.h"

namespace ddo {
namespace {

using Stub = ddo::v1::Ddo::Stub;

constexpr char kTopUsage[] =
    "top takes [-n COUNT] [SECONDS [COUNT]]: SECONDS from 0.1 to 3600, COUNT at least 1";

struct TopOptions {
  double interval = 1;
  std::optional<int64_t> count;  // screens; none: until interrupted
};

// The options, or nullopt for a bad command line.
std::optional<TopOptions> ParseTopOptions(const std::vector<std::string>& operands) {
  TopOptions options;
  std::vector<std::string> positional;
  for (size_t i = 0; i < operands.size(); ++i) {
    if (operands[i] != "-n") {
      positional.push_back(operands[i]);
      continue;
    }
    int64_t screens = 0;
    if (options.count || i + 1 >= operands.size() || !absl::SimpleAtoi(operands[++i], &screens) ||
        screens < 1) {
      return std::nullopt;
    }
    options.count = screens;
  }
  if (positional.size() > 2 ||
      (!positional.empty() && (!absl::SimpleAtod(positional[0], &options.interval) ||
                               !(options.interval >= 0.1) || options.interval > 3600))) {
    return std::nullopt;
  }
  if (positional.size() == 2) {
    int64_t screens = 0;
    if (options.count || !absl::SimpleAtoi(positional[1], &screens) || screens < 1) {
      return std::nullopt;
    }
    options.count = screens;
  }
  return options;
}

// One screen's stats, sessions and components; the failed RPC's exit status otherwise.
std::optional<int> TakeSnapshot(CtlConnection& connection, TopSnapshot* now) {
  now->taken = absl::Now();
  if (auto status =
          CallDaemon(connection, &Stub::GetStats, ddo::v1::GetStatsRequest(), &now->stats);
      !status.ok()) {
    return CtlRpcFailed("GetStats", status);
  }
  if (auto status = CallDaemon(connection, &Stub::ListSessions, ddo::v1::ListSessionsRequest(),
                               &now->sessions);
      !status.ok()) {
    return CtlRpcFailed("ListSessions", status);
  }
  if (auto status = CallDaemon(connection, &Stub::ListComponents, ddo::v1::ListComponentsRequest(),
                               &now->components);
      !status.ok()) {
    return CtlRpcFailed("ListComponents", status);
  }
  return std::nullopt;
}

}  // namespace

int RunTopCommand(const CtlArgs& args, CtlConnection& connection) {
  const bool terminal = ::isatty(STDOUT_FILENO) != 0;
  std::optional<TopOptions> options = ParseTopOptions(args.operands);
  if (!options) return CtlUsage(kTopUsage);
  if (!options->count && !terminal) options->count = 1;
  ddo::v1::DaemonInfo info;
  if (auto status = CallDaemon(connection, &Stub::GetInfo, ddo::v1::GetInfoRequest(), &info);
      !status.ok()) {
    return CtlRpcFailed("GetInfo", status);
  }
  std::optional<TopSnapshot> before;
  for (int64_t screen = 0; !options->count || screen < *options->count; ++screen) {
    if (screen > 0) absl::SleepFor(absl::Seconds(options->interval));
    TopSnapshot now;
    if (std::optional<int> failed = TakeSnapshot(connection, &now)) return *failed;
    if (terminal) std::fputs("\033[H\033[2J", stdout);      // home, clear
    if (!terminal && screen > 0) std::fputs("\n", stdout);  // a blank line between screens
    std::fputs(FormatTop(info, now, before).c_str(), stdout);
    std::fflush(stdout);
    before = std::move(now);
  }
  return kCtlExitOk;
}

}  // namespace ddo
