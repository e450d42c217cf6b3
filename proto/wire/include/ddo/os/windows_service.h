// File: proto/wire/include/ddo/os/windows_service.h
//
// The service's life cycle on Windows (docs/windows.md): the service control manager starts
// the program, learns that it serves, and asks it to stop. RunAsWindowsService connects the
// calling thread to the manager (StartServiceCtrlDispatcherW) and runs the body on the
// service's thread with a WindowsServiceSession, through which it reports that it runs and
// learns of a stop (SERVICE_CONTROL_STOP, or SHUTDOWN when Windows shuts down). The service
// accepts no pause: a daemon that holds memory for others has nothing useful to do paused.
// Restarting after a crash is the service's recovery setting, made when it is installed
// (deploy/windows/).
//
// On Linux the same life cycle is systemd's: daemon/server/service_notifier (sd_notify) and
// stop_waiter (SIGTERM); this header is Windows-only.
//
// Thread-safety: the session's methods may be called from any thread.
#ifndef DDO_OS_WINDOWS_SERVICE_H_
#define DDO_OS_WINDOWS_SERVICE_H_

#ifdef _WIN32

#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "ddo/os/native_handle.h"

namespace ddo::os {

class WindowsServiceSession {
 public:
  // SERVICE_RUNNING, accepting STOP and SHUTDOWN: call once the service serves.
  void ReportRunning();
  // True once the manager asked the service to stop, waiting at most `timeout` for that.
  bool WaitForStop(absl::Duration timeout) const;
  // SERVICE_STOP_PENDING with a hint of how long stopping takes (the manager waits that long
  // before it calls the service hung); call again during a long stop.
  void ReportStopping(absl::Duration expected);

 private:
  friend struct WindowsServiceRun;
  WindowsServiceSession() = default;

  void* status_handle_ = nullptr;  // SERVICE_STATUS_HANDLE
  NativeHandle stop_event_;
  unsigned long checkpoint_ = 0;
};

// Runs `body` as the Windows service `name`, blocking until it has stopped; the service's exit
// code is what `body` returns (non-zero: a service-specific error the manager records).
// FailedPrecondition when the process was not started by the service control manager (it is
// then a console program: run the body some other way).
absl::Status RunAsWindowsService(const std::string& name,
                                 std::function<int(WindowsServiceSession&)> body);

}  // namespace ddo::os

#endif  // _WIN32

#endif  // DDO_OS_WINDOWS_SERVICE_H_
