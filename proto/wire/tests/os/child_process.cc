#include "child_process.h"

#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"

#ifdef _WIN32
#include <windows.h>
#else
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;
#endif

namespace ddo::os::test {

#ifdef _WIN32

absl::StatusOr<ChildProcess> ChildProcess::Start(const std::vector<std::string>& arguments) {
  wchar_t path[MAX_PATH];
  if (::GetModuleFileNameW(nullptr, path, MAX_PATH) == 0) {
    return absl::InternalError("GetModuleFileNameW failed");
  }
  std::wstring command = L"\"" + std::wstring(path) + L"\" --child";
  for (const std::string& argument : arguments) {
    command += L" " + std::wstring(argument.begin(), argument.end());  // ASCII roles and names
  }
  STARTUPINFOW startup{};
  startup.cb = sizeof(startup);
  PROCESS_INFORMATION process{};
  if (!::CreateProcessW(path, command.data(), nullptr, nullptr, FALSE, 0, nullptr, nullptr,
                        &startup, &process)) {
    return absl::InternalError(absl::StrCat("CreateProcessW failed: ", ::GetLastError()));
  }
  ::CloseHandle(process.hThread);
  return ChildProcess(process.dwProcessId, NativeHandle(process.hProcess));
}

int ChildProcess::Wait() {
  waited_ = true;
  ::WaitForSingleObject(handle_.get(), INFINITE);
  DWORD code = 0;
  return ::GetExitCodeProcess(handle_.get(), &code) ? static_cast<int>(code) : -1;
}

#else

absl::StatusOr<ChildProcess> ChildProcess::Start(const std::vector<std::string>& arguments) {
  std::vector<std::string> words = {"/proc/self/exe", "--child"};
  words.insert(words.end(), arguments.begin(), arguments.end());
  std::vector<char*> argv;
  for (std::string& word : words) argv.push_back(word.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  if (const int error = ::posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), environ);
      error != 0) {
    return absl::InternalError(absl::StrCat("posix_spawn failed: ", std::strerror(error)));
  }
  return ChildProcess(pid, NativeHandle());
}

int ChildProcess::Wait() {
  waited_ = true;
  int status = 0;
  if (::waitpid(static_cast<pid_t>(pid_), &status, 0) != static_cast<pid_t>(pid_)) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

#endif

ChildProcess::~ChildProcess() {
  if (pid_ != 0 && !waited_) Wait();
}

}  // namespace ddo::os::test
