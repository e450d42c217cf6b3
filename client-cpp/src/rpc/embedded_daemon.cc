#include "embedded_daemon.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <set>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "channel.h"
#include "daemon_only_variables.h"
#include "ddo/wire/file_tree.h"
#include "ddo/wire/identity_protocol.h"
#include "ddo/wire/posix_error.h"

extern char** environ;

namespace ddo {
namespace {

constexpr double kDefaultStartTimeoutSeconds = 15.0;
constexpr auto kPollInterval = std::chrono::milliseconds(20);
constexpr double kHealthTimeoutSeconds = 0.5;
constexpr auto kStopTimeout = std::chrono::seconds(5);
constexpr size_t kLogTailBytes = 64 * 1024;
constexpr size_t kLogTailLines = 20;

absl::Status Failed(absl::string_view message) {
  return absl::FailedPreconditionError(message);
}

bool IsExecutable(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode) &&
         ::access(path.c_str(), X_OK) == 0;
}

absl::StatusOr<std::string> FindDdodBinary() {
  if (const char* configured = std::getenv("DDO_DDOD_BINARY");
      configured != nullptr && *configured != '\0') {
    if (IsExecutable(configured)) return AbsolutePath(configured);
    return Failed(absl::StrCat(
        "DDO_DDOD_BINARY='", configured, "' is not an executable file; point it at a built ddod "
        "(e.g. build/bin/ddod) or unset it to use ddod from PATH"));
  }
  const char* path = std::getenv("PATH");
  for (absl::string_view directory : absl::StrSplit(path != nullptr ? path : "", ':')) {
    if (directory.empty()) continue;
    const std::string candidate = absl::StrCat(directory, "/ddod");
    if (IsExecutable(candidate)) return candidate;
  }
  return Failed(
      "no ddod executable to start a private daemon: ddod is not on PATH and DDO_DDOD_BINARY is "
      "not set. Install ddod (or build it: tools/build.sh) and put it on PATH or set "
      "DDO_DDOD_BINARY to it; or start a shared daemon with `ddod --preset warm_process` and "
      "set DDO_DAEMON to its address");
}

absl::StatusOr<double> StartTimeout() {
  const char* text = std::getenv("DDO_EMBEDDED_START_TIMEOUT");
  if (text == nullptr || *text == '\0') return kDefaultStartTimeoutSeconds;
  double value = 0;
  if (!absl::SimpleAtod(text, &value) || !(value > 0) || !std::isfinite(value)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "DDO_EMBEDDED_START_TIMEOUT='", text, "' is not a positive number of seconds"));
  }
  return value;
}

// True when `path` (not followed) is a directory of this user nobody else may write to;
// `exact`: with mode 0700 exactly.
bool OwnedPrivately(const std::string& path, bool exact) {
  struct stat info {};
  if (::lstat(path.c_str(), &info) != 0 || !S_ISDIR(info.st_mode) ||
      info.st_uid != ::geteuid()) {
    return false;
  }
  const mode_t mode = info.st_mode & 07777;
  return exact ? mode == 0700 : (mode & (S_IWGRP | S_IWOTH)) == 0;
}

std::string MakeTemporaryDirectory(const std::string& parent) {
  std::string pattern = absl::StrCat(parent, "/ddo-embedded-XXXXXX");
  return ::mkdtemp(pattern.data()) != nullptr ? pattern : std::string();
}

// A new 0700 directory under a private XDG_RUNTIME_DIR, else under the temp dir.
absl::StatusOr<std::string> MakePrivateDirectory() {
  std::string directory;
  const char* runtime_dir = std::getenv("XDG_RUNTIME_DIR");
  if (runtime_dir != nullptr && *runtime_dir != '\0' && OwnedPrivately(runtime_dir, false)) {
    directory = MakeTemporaryDirectory(runtime_dir);  // "" when stale (e.g. after su)
  }
  if (directory.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    directory = MakeTemporaryDirectory(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp");
  }
  if (directory.empty()) return PosixError("mkdtemp for a private ddod", errno);
  if (!OwnedPrivately(directory, true)) {
    RemoveTree(directory);
    return Failed(absl::StrCat("the private directory ", directory,
                               " made for ddod is not a directory of yours with mode 0700 "
                               "(another user may have replaced it): not starting ddod there"));
  }
  return directory;
}

std::map<std::string, std::string> ProcessEnvironment() {
  std::map<std::string, std::string> environment;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    const absl::string_view text(*entry);
    const size_t equals = text.find('=');
    if (equals == absl::string_view::npos) continue;
    environment.emplace(std::string(text.substr(0, equals)), std::string(text.substr(equals + 1)));
  }
  return environment;
}

}  // namespace

std::map<std::string, std::string> EmbeddedDaemonEnvironment(
    const std::map<std::string, std::string>& environment) {
  auto inherit = environment.find("DDO_EMBEDDED_INHERIT_SETTINGS");
  if (inherit != environment.end()) {
    const std::string value = absl::AsciiStrToLower(absl::StripAsciiWhitespace(inherit->second));
    if (value == "1" || value == "true" || value == "yes" || value == "on") return environment;
  }
  const std::set<std::string> kept(std::begin(kDaemonOnlyVariables),
                                   std::end(kDaemonOnlyVariables));
  std::map<std::string, std::string> result;
  for (const auto& [name, value] : environment) {
    if (!absl::StartsWith(name, "DDO_") || kept.count(name) != 0) result.emplace(name, value);
  }
  return result;
}

absl::StatusOr<std::unique_ptr<EmbeddedDaemon>> EmbeddedDaemon::Start() {
  absl::StatusOr<std::string> binary = FindDdodBinary();
  if (!binary.ok()) return binary.status();
  absl::StatusOr<double> timeout = StartTimeout();
  if (!timeout.ok()) return timeout.status();
  absl::StatusOr<std::string> directory = MakePrivateDirectory();
  if (!directory.ok()) return directory.status();
  const std::string log_path = *directory + "/ddod.log";
  UniqueFd log(::open(log_path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  if (!log.valid()) {
    const int error = errno;
    RemoveTree(*directory);
    return PosixError(absl::StrCat("open ", log_path), error);
  }

  std::vector<std::string> arguments = {*binary, "--socket", *directory + "/ddod.sock",
                                        "--parent-pid", absl::StrCat(::getpid())};
  if (const char* level = std::getenv("DDO_LOG_LEVEL"); level != nullptr && *level != '\0') {
    arguments.insert(arguments.end(), {"--log-level", level});
  }
  std::vector<std::string> variables;
  for (const auto& [name, value] : EmbeddedDaemonEnvironment(ProcessEnvironment())) {
    variables.push_back(absl::StrCat(name, "=", value));
  }
  std::vector<char*> argv;
  for (std::string& argument : arguments) argv.push_back(argument.data());
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (std::string& variable : variables) envp.push_back(variable.data());
  envp.push_back(nullptr);

  // stdin from /dev/null, stdout and stderr to the log; nothing else is inherited (every
  // descriptor of ours is O_CLOEXEC, and closefrom covers those of other libraries).
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, log.get(), 1);
  posix_spawn_file_actions_adddup2(&actions, log.get(), 2);
  posix_spawn_file_actions_addclosefrom_np(&actions, 3);
  pid_t pid = 0;
  const int spawned = ::posix_spawn(&pid, binary->c_str(), &actions, nullptr, argv.data(),
                                    envp.data());
  posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0) {
    RemoveTree(*directory);
    return Failed(absl::StrCat("could not run ", *binary, ": ", std::strerror(spawned)));
  }
  std::unique_ptr<EmbeddedDaemon> daemon(new EmbeddedDaemon(pid, *directory, std::move(log)));
  // On failure the daemon's destructor stops it and removes the directory.
  if (absl::Status serving = daemon->WaitUntilServing(*timeout, absl::StrJoin(arguments, " "));
      !serving.ok()) {
    return serving;
  }
  ::unlink(log_path.c_str());
  return daemon;
}

EmbeddedDaemon::EmbeddedDaemon(pid_t pid, std::string directory, UniqueFd log)
    : pid_(pid),
      directory_(std::move(directory)),
      socket_path_(directory_ + "/ddod.sock"),
      log_(std::move(log)) {}

EmbeddedDaemon::~EmbeddedDaemon() {
  if (pid_ > 0 && ::waitpid(pid_, nullptr, WNOHANG) == 0) {
    ::kill(pid_, SIGTERM);
    const auto deadline = std::chrono::steady_clock::now() + kStopTimeout;
    bool reaped = false;
    while (!reaped && std::chrono::steady_clock::now() < deadline) {
      reaped = ::waitpid(pid_, nullptr, WNOHANG) != 0;
      if (!reaped) std::this_thread::sleep_for(kPollInterval);
    }
    if (!reaped) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  RemoveTree(directory_);
}

std::string EmbeddedDaemon::LogTail() const {
  const off_t end = ::lseek(log_.get(), 0, SEEK_END);
  if (end <= 0) return "";
  const off_t start = end > static_cast<off_t>(kLogTailBytes) ? end - kLogTailBytes : 0;
  std::string text(static_cast<size_t>(end - start), '\0');
  const ssize_t got = ::pread(log_.get(), text.data(), text.size(), start);
  text.resize(got > 0 ? static_cast<size_t>(got) : 0);
  std::vector<absl::string_view> lines =
      absl::StrSplit(absl::StripTrailingAsciiWhitespace(text), '\n');
  if (lines.size() > kLogTailLines) lines.erase(lines.begin(), lines.end() - kLogTailLines);
  return absl::StrJoin(lines, "\n");
}

absl::Status EmbeddedDaemon::WaitUntilServing(double timeout_seconds,
                                              const std::string& command) {
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration<double>(timeout_seconds);
  auto excerpt = [this] {
    const std::string tail = LogTail();
    return tail.empty() ? std::string("; ddod wrote nothing")
                        : absl::StrCat("; ddod's last output:\n", tail);
  };
  while (true) {
    int wait_status = 0;
    if (::waitpid(pid_, &wait_status, WNOHANG) == pid_) {
      pid_ = -1;  // reaped: the destructor must not signal a reused pid
      const int code = WIFEXITED(wait_status) ? WEXITSTATUS(wait_status)
                                              : -WTERMSIG(wait_status);
      return Failed(absl::StrCat("the private ddod exited with code ", code,
                                 " before serving (", command, ")", excerpt()));
    }
    // The identity socket too: the client's first step is to connect to it.
    struct stat info {};
    if (::stat(socket_path_.c_str(), &info) == 0 &&
        ::stat(IdentitySocketPath(socket_path_).c_str(), &info) == 0 &&
        IsServing(absl::StrCat("unix:", socket_path_), kHealthTimeoutSeconds)) {
      return absl::OkStatus();
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      return Failed(absl::StrCat("the private ddod (pid ", pid_, ") did not serve on ",
                                 socket_path_, " within ", timeout_seconds,
                                 " s (DDO_EMBEDDED_START_TIMEOUT)", excerpt()));
    }
    std::this_thread::sleep_for(kPollInterval);
  }
}

}  // namespace ddo
