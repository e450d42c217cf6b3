// The service's life cycle through the service control manager (wine's, in CI): installed,
// started, running, stopped, removed. Windows only: on Linux the life cycle is systemd's.
#ifdef _WIN32

#include "ddo/os/windows_service.h"

#include <windows.h>

#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "ddo/os/process_watch.h"
#include "ddo/os/shared_memory.h"
#include "gtest/gtest.h"

namespace ddo::os {
namespace {

// An SC_HANDLE, closed at the end of the scope.
class ServiceHandle {
 public:
  explicit ServiceHandle(SC_HANDLE handle) : handle_(handle) {}
  ServiceHandle(const ServiceHandle&) = delete;
  ServiceHandle& operator=(const ServiceHandle&) = delete;
  ~ServiceHandle() {
    if (handle_ != nullptr) ::CloseServiceHandle(handle_);
  }
  SC_HANDLE get() const { return handle_; }

 private:
  SC_HANDLE handle_;
};

// Waits up to 30 s for the service to reach `state`; returns its last status.
SERVICE_STATUS WaitForState(SC_HANDLE service, DWORD state) {
  SERVICE_STATUS status{};
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (::QueryServiceStatus(service, &status) && status.dwCurrentState != state &&
         absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(50));
  }
  return status;
}

std::wstring ThisProgram() {
  wchar_t path[MAX_PATH];
  ::GetModuleFileNameW(nullptr, path, MAX_PATH);
  return path;
}

TEST(WindowsServiceTest, InstalledStartedRunningAndStoppedThroughTheServiceManager) {
  const std::string tag = absl::StrCat("ddo-os-test-", CurrentProcessId(), "-service");
  absl::StatusOr<SharedMemory> segment = SharedMemory::Create(tag, 4096);
  ASSERT_TRUE(segment.ok()) << segment.status();
  absl::StatusOr<MappedView> view = segment->Map(/*writable=*/true);
  ASSERT_TRUE(view.ok()) << view.status();
  const char* bytes = static_cast<const char*>(view->data());

  ServiceHandle manager(::OpenSCManagerW(nullptr, nullptr, SC_MANAGER_ALL_ACCESS));
  ASSERT_NE(manager.get(), nullptr) << ::GetLastError();
  const std::wstring name(tag.begin(), tag.end());
  const std::wstring command = L"\"" + ThisProgram() + L"\" --child service " + name + L" " + name;
  ServiceHandle service(::CreateServiceW(
      manager.get(), name.c_str(), name.c_str(), SERVICE_ALL_ACCESS, SERVICE_WIN32_OWN_PROCESS,
      SERVICE_DEMAND_START, SERVICE_ERROR_NORMAL, command.c_str(), nullptr, nullptr, nullptr,
      nullptr, nullptr));
  ASSERT_NE(service.get(), nullptr) << ::GetLastError();

  ASSERT_TRUE(::StartServiceW(service.get(), 0, nullptr)) << ::GetLastError();
  SERVICE_STATUS status = WaitForState(service.get(), SERVICE_RUNNING);
  EXPECT_EQ(status.dwCurrentState, static_cast<DWORD>(SERVICE_RUNNING));
  EXPECT_EQ(status.dwControlsAccepted & SERVICE_ACCEPT_STOP, static_cast<DWORD>(SERVICE_ACCEPT_STOP));
  EXPECT_EQ(status.dwControlsAccepted & SERVICE_ACCEPT_PAUSE_CONTINUE, 0u) << "no pause";
  EXPECT_STREQ(bytes, "running") << "the body ran before it reported running";

  ASSERT_TRUE(::ControlService(service.get(), SERVICE_CONTROL_STOP, &status)) << ::GetLastError();
  status = WaitForState(service.get(), SERVICE_STOPPED);
  EXPECT_EQ(status.dwCurrentState, static_cast<DWORD>(SERVICE_STOPPED));
  EXPECT_EQ(status.dwWin32ExitCode, static_cast<DWORD>(NO_ERROR));
  EXPECT_STREQ(bytes + 64, "stopped") << "the body saw the stop and returned";
  EXPECT_TRUE(::DeleteService(service.get())) << ::GetLastError();
}

TEST(WindowsServiceTest, AProgramNotStartedAsAServiceIsToldSo) {
  bool ran = false;
  const absl::Status status = RunAsWindowsService("ddo-os-test-console", [&ran](auto&) {
    ran = true;
    return 0;
  });
  EXPECT_TRUE(absl::IsFailedPrecondition(status)) << status;
  EXPECT_NE(status.message().find("not started by the service control manager"),
            absl::string_view::npos);
  EXPECT_FALSE(ran);
}

}  // namespace
}  // namespace ddo::os

#endif  // _WIN32
