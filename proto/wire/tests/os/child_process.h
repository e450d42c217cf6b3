// File: proto/wire/tests/os/child_process.h
//
// The platform layer's tests run a second process: this test binary again, with "--child"
// and a role (os_test_main.cc), started with posix_spawn or CreateProcessW.
//
// Thread-safety: tests only; each object belongs to the test thread that made it.
#ifndef DDO_OS_TESTS_CHILD_PROCESS_H_
#define DDO_OS_TESTS_CHILD_PROCESS_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "ddo/os/native_handle.h"
#include "ddo/os/process_watch.h"

namespace ddo::os::test {

class ChildProcess {
 public:
  // Starts this binary as "--child <arguments...>".
  static absl::StatusOr<ChildProcess> Start(const std::vector<std::string>& arguments);

  ChildProcess(ChildProcess&& other) noexcept
      : pid_(std::exchange(other.pid_, 0)), handle_(std::move(other.handle_)),
        waited_(other.waited_) {}
  ChildProcess& operator=(ChildProcess&&) = delete;
  // Waits for a child that was not waited for.
  ~ChildProcess();

  ProcessId pid() const { return pid_; }
  // Waits for the child to end and returns its exit code (-1 when it did not exit normally).
  int Wait();

 private:
  ChildProcess(ProcessId pid, NativeHandle handle) : pid_(pid), handle_(std::move(handle)) {}

  ProcessId pid_ = 0;
  NativeHandle handle_;  // Windows: the process handle; POSIX: none (waitpid)
  bool waited_ = false;
};

// The child's side: runs the role named by argv[2]; returns its exit code.
int RunChild(int argc, char** argv);

}  // namespace ddo::os::test

#endif  // DDO_OS_TESTS_CHILD_PROCESS_H_
