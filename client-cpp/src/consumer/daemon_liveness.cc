// File: client-cpp/src/consumer/daemon_liveness.cc
#include "client-cpp/src/consumer/daemon_liveness.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace ddo::consumer {
namespace {

enum class ProcState { kRunning, kGone, kUnknown };

// The state letter of /proc/<pid>/stat: the first field after the last ')' (the command name
// in parentheses may itself hold ')' and spaces).
ProcState ReadProcState(int64_t pid) {
  const std::string path = "/proc/" + std::to_string(pid) + "/stat";
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT ? ProcState::kGone : ProcState::kUnknown;
  char buffer[1024];
  ssize_t length;
  do {
    length = ::read(fd, buffer, sizeof(buffer) - 1);
  } while (length < 0 && errno == EINTR);
  ::close(fd);
  if (length < 0) return errno == ESRCH ? ProcState::kGone : ProcState::kUnknown;
  buffer[length] = '\0';
  const char* close_paren = std::strrchr(buffer, ')');
  if (close_paren == nullptr) return ProcState::kUnknown;
  const char* state = close_paren + 1;
  while (*state == ' ') ++state;
  if (*state == '\0') return ProcState::kUnknown;
  return (*state == 'Z' || *state == 'X') ? ProcState::kGone : ProcState::kRunning;
}

}  // namespace

bool ProcessAlive(int64_t pid) {
  if (pid <= 0) return false;
  switch (ReadProcState(pid)) {
    case ProcState::kRunning: return true;
    case ProcState::kGone: return false;
    case ProcState::kUnknown: break;
  }
  if (::kill(static_cast<pid_t>(pid), 0) == 0) return true;
  return errno != ESRCH;  // EPERM: it runs as another user
}

}  // namespace ddo::consumer
