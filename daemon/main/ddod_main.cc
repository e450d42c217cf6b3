// ddod: the DDO daemon. See `ddod --help` and docs/configuration.md.
#include <sys/resource.h>

#include <cstdio>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "daemon/common/logging.h"
#include "daemon/common/version.h"
#include "daemon/config/daemon_options.h"
#include "daemon/config/environment.h"
#include "daemon/server/daemon_server.h"
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

}  // namespace

int main(int argc, char** argv) {
  // Before any thread exists, so that every thread inherits the mask (stop_waiter.h).
  if (absl::Status blocked = ddo::BlockTerminationSignals(); !blocked.ok()) {
    return Fail(kExitFailure, blocked);
  }
  const ddo::Environment env = ddo::ProcessEnvironment();
  const ddo::UserContext user = ddo::UserContext::FromProcess(env);
  auto options = ddo::ResolveDaemonOptions(std::vector<std::string>(argv + 1, argv + argc), env,
                                           user);
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
  ddo::InitLogging(options->log_level);
  // Passed files and granted segments are descriptors: use all the descriptors allowed.
  if (rlimit files{}; ::getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
    files.rlim_cur = files.rlim_max;
    (void)::setrlimit(RLIMIT_NOFILE, &files);
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
  const ddo::StopReason reason = waiter->Wait();
  (*server)->Shutdown(reason.description);
  return kExitOk;
}
