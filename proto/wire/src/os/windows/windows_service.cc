#include "ddo/os/windows_service.h"

#include <windows.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "windows_error.h"

namespace ddo::os {

// The one service this process runs: ServiceMain and the control handler are C callbacks, and
// the dispatcher gives ServiceMain no context but the name.
struct WindowsServiceRun {
  std::wstring name;
  std::function<int(WindowsServiceSession&)> body;
  WindowsServiceSession session;
  int exit_code = 0;

  static WindowsServiceRun* current;

  bool CreateStopEvent() {
    session.stop_event_ = NativeHandle(::CreateEventW(nullptr, TRUE, FALSE, nullptr));
    return session.stop_event_.valid();
  }
  static DWORD WINAPI Control(DWORD control, DWORD, void*, void* context);
  static void WINAPI Main(DWORD, wchar_t**);
  void Report(DWORD state, DWORD accepted, DWORD wait_hint_ms, DWORD code);
};

WindowsServiceRun* WindowsServiceRun::current = nullptr;

namespace {

constexpr DWORD kAccepted = SERVICE_ACCEPT_STOP | SERVICE_ACCEPT_SHUTDOWN;

DWORD Milliseconds(absl::Duration duration) {
  return static_cast<DWORD>(std::clamp<int64_t>(absl::ToInt64Milliseconds(duration), 0,
                                                INFINITE - 1));
}

}  // namespace

void WindowsServiceRun::Report(DWORD state, DWORD accepted, DWORD wait_hint_ms, DWORD code) {
  SERVICE_STATUS status{};
  status.dwServiceType = SERVICE_WIN32_OWN_PROCESS;
  status.dwCurrentState = state;
  status.dwControlsAccepted = accepted;
  status.dwWaitHint = wait_hint_ms;
  if (code != 0) {
    status.dwWin32ExitCode = ERROR_SERVICE_SPECIFIC_ERROR;
    status.dwServiceSpecificExitCode = code;
  }
  const bool pending = state == SERVICE_START_PENDING || state == SERVICE_STOP_PENDING;
  status.dwCheckPoint = pending ? ++session.checkpoint_ : 0;
  ::SetServiceStatus(static_cast<SERVICE_STATUS_HANDLE>(session.status_handle_), &status);
}

DWORD WINAPI WindowsServiceRun::Control(DWORD control, DWORD, void*, void* context) {
  auto* run = static_cast<WindowsServiceRun*>(context);
  switch (control) {
    case SERVICE_CONTROL_STOP:
    case SERVICE_CONTROL_SHUTDOWN:
      run->Report(SERVICE_STOP_PENDING, 0, 30000, 0);
      ::SetEvent(run->session.stop_event_.get());
      return NO_ERROR;
    case SERVICE_CONTROL_INTERROGATE:
      return NO_ERROR;
    default:
      return ERROR_CALL_NOT_IMPLEMENTED;
  }
}

void WINAPI WindowsServiceRun::Main(DWORD, wchar_t**) {
  WindowsServiceRun* run = current;
  run->session.status_handle_ =
      ::RegisterServiceCtrlHandlerExW(run->name.c_str(), &WindowsServiceRun::Control, run);
  if (run->session.status_handle_ == nullptr) {
    run->exit_code = -1;
    return;
  }
  run->Report(SERVICE_START_PENDING, 0, 30000, 0);
  run->exit_code = run->body(run->session);
  run->Report(SERVICE_STOPPED, 0, 0, static_cast<DWORD>(run->exit_code));
}

void WindowsServiceSession::ReportRunning() {
  WindowsServiceRun::current->Report(SERVICE_RUNNING, kAccepted, 0, 0);
}

bool WindowsServiceSession::WaitForStop(absl::Duration timeout) const {
  const DWORD wait = timeout == absl::InfiniteDuration() ? INFINITE : Milliseconds(timeout);
  return ::WaitForSingleObject(stop_event_.get(), wait) == WAIT_OBJECT_0;
}

void WindowsServiceSession::ReportStopping(absl::Duration expected) {
  WindowsServiceRun::current->Report(SERVICE_STOP_PENDING, 0, Milliseconds(expected), 0);
}

absl::Status RunAsWindowsService(const std::string& name,
                                 std::function<int(WindowsServiceSession&)> body) {
  if (WindowsServiceRun::current != nullptr) {
    return absl::FailedPreconditionError("this process already runs a service");
  }
  WindowsServiceRun run;
  run.name = Widen(name);
  run.body = std::move(body);
  if (!run.CreateStopEvent()) {
    return WindowsError("create the service's stop event", ::GetLastError());
  }
  WindowsServiceRun::current = &run;
  SERVICE_TABLE_ENTRYW table[] = {{run.name.data(), &WindowsServiceRun::Main},
                                  {nullptr, nullptr}};
  const BOOL dispatched = ::StartServiceCtrlDispatcherW(table);
  const DWORD error = ::GetLastError();
  WindowsServiceRun::current = nullptr;
  if (!dispatched) {
    if (error == ERROR_FAILED_SERVICE_CONTROLLER_CONNECT) {
      return absl::FailedPreconditionError(absl::StrCat(
          name, " was not started by the service control manager (a console program)"));
    }
    return WindowsError(absl::StrCat("run ", name, " as a service"), error);
  }
  return absl::OkStatus();
}

}  // namespace ddo::os
