// ddod: the DDO daemon. See `ddod --help` and docs/configuration.md.
#include <cstdio>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "daemon/common/descriptor_reserve.h"
#include "daemon/common/logging.h"
#include "daemon/common/version.h"
#include "daemon/config/daemon_options.h"
#include "daemon/config/environment.h"
#include "daemon/server/daemon_server.h"
#include "daemon/server/service_notifier.h"
#include "daemon/server/stop_waiter.h"

namespace {

// Exit statuses documented in --help.
constexpr int kExitOk = 0;
constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;
constexpr int kExitAlreadyRunning = 3;

int Fail(int code, const absl::Status& status) {
  std::fprintf(stderr, "ddod: %s\n", std::string(status.message()).c_str());
  return code;
}

// SIGHUP: the options resolved again (the --config file read anew, with the start's command
// line and environment); what can change while running changes. A file that does not parse
// changes nothing: ddod goes on with what it had and says why.
void Reload(const std::vector<std::string>& args, const ddo::Environment& env,
            const ddo::UserContext& user, ddo::DaemonServer& server,
            ddo::ServiceNotifier& notifier) {
  auto log = ddo::Logger("server");
  notifier.Reloading();
  auto fresh = ddo::ResolveDaemonOptions(args, env, user);
  if (!fresh.ok()) {
    log->error("reload refused, the configuration stays as it was: {}", fresh.status().message());
    notifier.Ready(absl::StrCat("reload refused (", fresh.status().message(), "); ",
                                server.StatusLine()));
    return;
  }
  const std::vector<std::string> pending = server.Reload(*fresh);
  log->info("configuration reloaded{}", pending.empty() ? "" : " (some changes need a restart)");
  notifier.Ready(pending.empty()
                     ? server.StatusLine()
                     : absl::StrCat("reloaded; needs a restart for ", absl::StrJoin(pending, ", "),
                                    "; ", server.StatusLine()));
}

}  // namespace

int main(int argc, char** argv) {
  // Before any thread exists, so that every thread inherits the mask (stop_waiter.h).
  if (absl::Status blocked = ddo::BlockTerminationSignals(); !blocked.ok()) {
    return Fail(kExitFailure, blocked);
  }
  const ddo::Environment env = ddo::ProcessEnvironment();
  const ddo::UserContext user = ddo::UserContext::FromProcess(env);
  const std::vector<std::string> args(argv + 1, argv + argc);
  auto options = ddo::ResolveDaemonOptions(args, env, user);
  if (!options.ok()) {
    return Fail(kExitUsage, options.status());
  }
  if (options->show_help) {
    std::fputs(ddo::DaemonUsage(user).c_str(), stdout);
    return kExitOk;
  }
  if (options->show_version) {
    std::printf("ddod %s (protocol %s)\n", ddo::kVersion, ddo::kApiVersion);
    return kExitOk;
  }
  ddo::InitLogging(options->log_level, options->log_format);
  // Passed files and granted segments are descriptors: use all the descriptors allowed
  // (docs/security.md §5: some are kept for ddod's own work).
  if (auto files = ddo::RaiseDescriptorLimit(); !files.ok()) {
    ddo::Logger("server")->warn("descriptor limit not raised: {}", files.status().message());
  } else if (files->soft != files->soft_before) {
    ddo::Logger("server")->info("descriptor limit raised from {} to {} (the hard limit)",
                                files->soft_before, files->soft);
  }

  auto waiter = ddo::StopWaiter::Create(options->parent_pid);
  if (!waiter.ok()) {
    return Fail(kExitFailure, waiter.status());
  }
  auto server = ddo::DaemonServer::Start(*std::move(options));
  if (!server.ok()) {
    return Fail(absl::IsAlreadyExists(server.status()) ? kExitAlreadyRunning : kExitFailure,
                server.status());
  }
  ddo::ServiceNotifier notifier((*server)->context().listen_addresses.front());
  notifier.Ready((*server)->StatusLine());
  for (;;) {
    const ddo::StopReason reason = waiter->Wait();
    if (reason.kind == ddo::StopReason::Kind::kReload) {
      Reload(args, env, user, **server, notifier);
      continue;
    }
    notifier.Stopping(absl::StrCat("stopping: ", reason.description));
    (*server)->Shutdown(reason.description);
    return kExitOk;
  }
}
