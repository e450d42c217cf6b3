// File: client-cpp/src/rpc/embedded_daemon.h
//
// A private ddod started as a child of this process (the Python client's embedded.py): run as
// `ddod --socket DIR/ddod.sock --parent-pid <pid>` in a fresh 0700 directory, so it also exits
// when this process dies in any way. Its stdout and stderr go to DIR/ddod.log, unlinked once it
// serves (the descriptor stays open for the log's tail). The runner's per-call DDO_* settings
// are stripped from its environment (daemon_only_variables.h), unless
// DDO_EMBEDDED_INHERIT_SETTINGS is set.
//
// Environment: DDO_DDOD_BINARY (default: ddod on PATH), DDO_EMBEDDED_START_TIMEOUT (seconds,
// default 15), DDO_LOG_LEVEL (passed as --log-level).
//
// Thread-safety: one owner; the destructor stops the daemon (SIGTERM, SIGKILL after 5 s).
#ifndef DDO_CLIENT_RPC_EMBEDDED_DAEMON_H_
#define DDO_CLIENT_RPC_EMBEDDED_DAEMON_H_

#include <sys/types.h>

#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "ddo/wire/unique_fd.h"

namespace ddo {

class EmbeddedDaemon {
 public:
  // FAILED_PRECONDITION when there is no binary, ddod exits or does not serve in time (the
  // end of its log quoted); INVALID_ARGUMENT for a bad DDO_EMBEDDED_START_TIMEOUT.
  static absl::StatusOr<std::unique_ptr<EmbeddedDaemon>> Start();

  EmbeddedDaemon(const EmbeddedDaemon&) = delete;
  EmbeddedDaemon& operator=(const EmbeddedDaemon&) = delete;
  ~EmbeddedDaemon();

  pid_t pid() const { return pid_; }
  const std::string& socket_path() const { return socket_path_; }
  // The last lines ddod wrote.
  std::string LogTail() const;

 private:
  EmbeddedDaemon(pid_t pid, std::string directory, UniqueFd log);
  absl::Status WaitUntilServing(double timeout_seconds, const std::string& command);

  pid_t pid_;
  std::string directory_;
  std::string socket_path_;
  UniqueFd log_;
};

// The private ddod's environment: `environment` without the per-call DDO_* settings, unless
// DDO_EMBEDDED_INHERIT_SETTINGS asks to keep them all.
std::map<std::string, std::string> EmbeddedDaemonEnvironment(
    const std::map<std::string, std::string>& environment);

}  // namespace ddo

#endif  // DDO_CLIENT_RPC_EMBEDDED_DAEMON_H_
