// The platform layer's test binary: gtest, or with "--child ROLE ..." one of the roles its
// tests start in a second process (child_process.h).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/time/clock.h"
#include "child_process.h"
#include "ddo/os/shared_memory.h"
#include "ddo/os/shared_word.h"
#include "gtest/gtest.h"

#ifdef _WIN32
#include <windows.h>

#include "ddo/os/windows_instance_lock.h"
#include "ddo/os/windows_pipe.h"
#include "ddo/os/windows_service.h"
#endif

namespace ddo::os::test {
namespace {

// "share NAME": opens the segment NAME, checks that it starts with "parent", writes "child"
// at offset 64. Exit codes: 0 done, 2 not opened, 3 not mapped, 4 wrong bytes.
int Share(const std::string& name) {
  absl::StatusOr<SharedMemory> segment = SharedMemory::Open(name, /*writable=*/true);
  if (!segment.ok()) {
    std::fprintf(stderr, "child: %s\n", segment.status().ToString().c_str());
    return 2;
  }
  absl::StatusOr<MappedView> view = segment->Map(/*writable=*/true);
  if (!view.ok()) {
    std::fprintf(stderr, "child: %s\n", view.status().ToString().c_str());
    return 3;
  }
  char* bytes = static_cast<char*>(view->data());
  if (std::strcmp(bytes, "parent") != 0) return 4;
  std::strcpy(bytes + 64, "child");
  return 0;
}

// "open NAME": exit 0 when the segment NAME opens for writing, 5 when PermissionDenied,
// 6 when NotFound, 7 otherwise.
int OpenOnly(const std::string& name) {
  absl::StatusOr<SharedMemory> segment = SharedMemory::Open(name, /*writable=*/true);
  if (segment.ok()) return 0;
  if (absl::IsPermissionDenied(segment.status())) return 5;
  if (absl::IsNotFound(segment.status())) return 6;
  return 7;
}

// "wake SEGMENT SIGNAL VALUE": after 200 ms, stores VALUE (unless 0) into the segment's first
// word and wakes its waiter through SIGNAL. Exit codes: 0 done, 2 segment not opened, 3 not
// mapped, 9 no signal.
int Wake(const std::string& segment_name, const std::string& signal_name, uint32_t value) {
  absl::StatusOr<SharedMemory> segment = SharedMemory::Open(segment_name, /*writable=*/true);
  if (!segment.ok()) return 2;
  absl::StatusOr<MappedView> view = segment->Map(/*writable=*/true);
  if (!view.ok()) return 3;
  absl::StatusOr<SharedWordSignal> signal = SharedWordSignal::Open(signal_name);
  if (!signal.ok()) return 9;
  auto* word = static_cast<std::atomic<uint32_t>*>(view->data());
  absl::SleepFor(absl::Milliseconds(200));
  if (value != 0) word->store(value, std::memory_order_release);
  signal->Wake(word);
  return 0;
}

#ifdef _WIN32
// "pipe-client PIPE": says HELLO, maps the handle of OPEN and writes "child" at offset 64, passes
// a temporary file holding "from-child" (FILE <value>), waits for DONE. Exit codes: 0 done,
// 10 not connected, 11 no OPEN, 12 not mapped, 13 no file, 14 no DONE.
int PipeClient(const std::string& name) {
  absl::StatusOr<PipeConnection> pipe = ConnectToPipe(name);
  if (!pipe.ok()) return 10;
  if (!pipe->Send("HELLO").ok()) return 10;
  absl::StatusOr<std::string> open = pipe->Receive();
  if (!open.ok() || open->rfind("OPEN ", 0) != 0) return 11;
  HANDLE mapping = reinterpret_cast<HANDLE>(std::strtoull(open->c_str() + 5, nullptr, 10));
  char* bytes = static_cast<char*>(::MapViewOfFile(mapping, FILE_MAP_WRITE, 0, 0, 0));
  if (bytes == nullptr || std::strcmp(bytes, "parent") != 0) return 12;
  std::strcpy(bytes + 64, "child");
  ::UnmapViewOfFile(bytes);
  wchar_t directory[MAX_PATH];
  wchar_t path[MAX_PATH];
  ::GetTempPathW(MAX_PATH, directory);
  ::GetTempFileNameW(directory, L"ddo", 0, path);
  HANDLE file = ::CreateFileW(path, GENERIC_READ | GENERIC_WRITE, 0, nullptr, CREATE_ALWAYS,
                              FILE_FLAG_DELETE_ON_CLOSE, nullptr);
  DWORD written = 0;
  if (file == INVALID_HANDLE_VALUE || !::WriteFile(file, "from-child", 10, &written, nullptr) ||
      ::SetFilePointer(file, 0, nullptr, FILE_BEGIN) != 0) {
    return 13;
  }
  if (!pipe->Send("FILE " + std::to_string(reinterpret_cast<uint64_t>(file))).ok()) return 13;
  absl::StatusOr<std::string> done = pipe->Receive();
  return done.ok() && *done == "DONE" ? 0 : 14;
}

// "lock SOCKET MS": takes the instance lock of SOCKET and holds it MS milliseconds. Exit codes:
// 0 done, 20 refused as held by another process (named in the refusal), 21 otherwise.
int Lock(const std::string& socket, int milliseconds) {
  absl::StatusOr<WindowsInstanceLock> lock = WindowsInstanceLock::Acquire(socket);
  if (absl::IsAlreadyExists(lock.status())) {
    return lock.status().message().find("process ") != absl::string_view::npos ? 20 : 21;
  }
  if (!lock.ok()) return 21;
  absl::SleepFor(absl::Milliseconds(milliseconds));
  return 0;
}

// "service NAME SEGMENT": runs as the Windows service NAME; writes "running" into SEGMENT
// before it reports so, and "stopped" at offset 64 once asked to stop.
int Service(const std::string& name, const std::string& segment_name) {
  absl::Status ran = RunAsWindowsService(name, [&segment_name](WindowsServiceSession& session) {
    absl::StatusOr<SharedMemory> segment = SharedMemory::Open(segment_name, /*writable=*/true);
    if (!segment.ok()) return 2;
    absl::StatusOr<MappedView> view = segment->Map(/*writable=*/true);
    if (!view.ok()) return 3;
    char* bytes = static_cast<char*>(view->data());
    std::strcpy(bytes, "running");
    session.ReportRunning();
    session.WaitForStop(absl::InfiniteDuration());
    std::strcpy(bytes + 64, "stopped");
    return 0;
  });
  return ran.ok() ? 0 : 8;
}
#endif

}  // namespace

int RunChild(int argc, char** argv) {
  const std::string role = argc > 2 ? argv[2] : "";
  if (role == "share" && argc == 4) return Share(argv[3]);
  if (role == "open" && argc == 4) return OpenOnly(argv[3]);
  if (role == "sleep-ms" && argc == 4) {
    absl::SleepFor(absl::Milliseconds(std::atoi(argv[3])));
    return 0;
  }
  if (role == "exit" && argc == 4) return std::atoi(argv[3]);
  if (role == "wake" && argc == 6) {
    return Wake(argv[3], argv[4], static_cast<uint32_t>(std::atoi(argv[5])));
  }
#ifdef _WIN32
  if (role == "service" && argc == 5) return Service(argv[3], argv[4]);
  if (role == "pipe-client" && argc == 4) return PipeClient(argv[3]);
  if (role == "lock" && argc == 5) return Lock(argv[3], std::atoi(argv[4]));
#endif
  std::fprintf(stderr, "unknown child role\n");
  return 100;
}

}  // namespace ddo::os::test

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "--child") == 0) {
    return ddo::os::test::RunChild(argc, argv);
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
