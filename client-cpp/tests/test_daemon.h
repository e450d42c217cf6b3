// File: client-cpp/tests/test_daemon.h
//
// A real ddod for the client's tests (this build's, or DDO_DDOD_BINARY), started on a socket in
// a private directory with its state beside it, as tests/python/conftest.py does.
//
// Thread-safety: tests only; each object belongs to the test thread that made it.
#ifndef DDO_CLIENT_TESTS_TEST_DAEMON_H_
#define DDO_CLIENT_TESTS_TEST_DAEMON_H_

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "ddo/rpc.h"
#include "ddo/wire/file_tree.h"
#include "gtest/gtest.h"

extern char** environ;

namespace ddo::test_support {

inline std::string DdodBinary() {
  const char* configured = std::getenv("DDO_DDOD_BINARY");
  return configured != nullptr && *configured != '\0' ? configured : DDO_TEST_DDOD_BINARY;
}

// A private directory (0700) with a short path (sun_path holds 107 bytes), removed afterwards.
class TempDir {
 public:
  TempDir() {
    char pattern[] = "/tmp/ddo-cpp-XXXXXX";
    path_ = ::mkdtemp(pattern) != nullptr ? pattern : "";
    ::chmod(path_.c_str(), 0700);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    RemoveTree(path_);  // not std::filesystem: ddo/wire/file_tree.h says why
  }
  std::string Join(const std::string& name) const { return path_ + "/" + name; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// A ddod child on DIR/run/ddod.sock with its state in DIR/state; SIGTERM on destruction.
class Ddod {
 public:
  explicit Ddod(const TempDir& dir, std::vector<std::string> extra = {})
      : socket_(dir.Join("run/ddod.sock")), log_(dir.Join("ddod.log")) {
    if (DdodBinary().empty()) {
      ADD_FAILURE() << "no ddod to start: set DDO_DDOD_BINARY (this build has none)";
      return;
    }
    std::vector<std::string> arguments = {DdodBinary(), "--socket", socket_, "--state-dir",
                                          dir.Join("state"), "--discard"};
    arguments.insert(arguments.end(), extra.begin(), extra.end());
    std::vector<char*> argv;
    for (std::string& argument : arguments) argv.push_back(argument.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, log_.c_str(), O_WRONLY | O_CREAT | O_APPEND,
                                     0600);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    EXPECT_EQ(::posix_spawn(&pid_, argv[0], &actions, nullptr, argv.data(), environ), 0)
        << argv[0];
    posix_spawn_file_actions_destroy(&actions);
    // Serving once both the gRPC and the identity socket exist and a client gets in.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (std::chrono::steady_clock::now() < deadline) {
      struct stat info {};
      if (::stat(socket_.c_str(), &info) == 0 && ::stat((socket_ + ".id").c_str(), &info) == 0) {
        ConnectOptions options;
        options.address = address();
        options.allow_embedded = false;
        if (RpcClient::Connect(options).ok()) return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ADD_FAILURE() << "ddod did not serve on " << socket_ << ":\n" << Log();
  }
  Ddod(const Ddod&) = delete;
  Ddod& operator=(const Ddod&) = delete;
  ~Ddod() { Stop(SIGTERM); }

  // Stops it with `signal` and reaps it (SIGKILL: a crash).
  void Stop(int signal) {
    if (pid_ <= 0) return;
    ::kill(pid_, signal);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = 0;
  }
  std::string address() const { return "unix:" + socket_; }
  pid_t pid() const { return pid_; }
  std::string Log() const {
    std::ifstream in(log_);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }

 private:
  std::string socket_;
  std::string log_;
  pid_t pid_ = 0;
};

}  // namespace ddo::test_support

#endif  // DDO_CLIENT_TESTS_TEST_DAEMON_H_
