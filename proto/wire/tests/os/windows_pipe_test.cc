// Caller identity and passing handles through a named pipe (the identity socket's role on
// Windows), between this test and a child process. Windows only.
#ifdef _WIN32

#include "ddo/os/windows_pipe.h"

#include <windows.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "../../src/os/windows/owner_only_security.h"
#include "../../src/os/windows/windows_error.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "child_process.h"
#include "ddo/os/shared_memory.h"
#include "gtest/gtest.h"

namespace ddo::os {
namespace {

using test::ChildProcess;

std::string OwnSid() {
  HANDLE raw = nullptr;
  ::OpenProcessToken(::GetCurrentProcess(), TOKEN_QUERY, &raw);
  NativeHandle token(raw);
  absl::StatusOr<std::wstring> sid = TokenUserSid(token.get());
  return sid.ok() ? Narrow(*sid) : "";
}

// The handle value a message "WORD <value>" carries, or 0.
uint64_t ValueOf(const std::string& message, const std::string& word) {
  uint64_t value = 0;
  if (message.rfind(word + " ", 0) != 0 ||
      !absl::SimpleAtoi(message.substr(word.size() + 1), &value)) {
    return 0;
  }
  return value;
}

TEST(WindowsPipeTest, TheServerLearnsWhoConnectedAndHandlesCrossBothWays) {
  const std::string name = absl::StrCat("ddo-os-test-", CurrentProcessId(), "-pipe");
  absl::StatusOr<PipeListener> listener = PipeListener::Create(name);
  ASSERT_TRUE(listener.ok()) << listener.status();

  absl::StatusOr<SharedMemory> segment = SharedMemory::Create(name + "-segment", 4096);
  ASSERT_TRUE(segment.ok()) << segment.status();
  absl::StatusOr<MappedView> view = segment->Map(/*writable=*/true);
  ASSERT_TRUE(view.ok()) << view.status();
  char* bytes = static_cast<char*>(view->data());
  std::strcpy(bytes, "parent");

  absl::StatusOr<ChildProcess> child = ChildProcess::Start({"pipe-client", name});
  ASSERT_TRUE(child.ok()) << child.status();
  absl::StatusOr<PipeConnection> connection = listener->Accept();
  ASSERT_TRUE(connection.ok()) << connection.status();

  absl::StatusOr<PipePeer> peer = connection->Peer();
  ASSERT_TRUE(peer.ok()) << peer.status();
  EXPECT_EQ(peer->pid, child->pid()) << "the system names the client's process";
  EXPECT_EQ(peer->user_sid, OwnSid()) << "and its account";
  EXPECT_EQ(connection->Receive().value_or(""), "HELLO");

  // A mapping into the client; the client writes through it.
  absl::StatusOr<uint64_t> there =
      connection->SendHandle(segment->handle(), FILE_MAP_READ | FILE_MAP_WRITE);
  ASSERT_TRUE(there.ok()) << there.status();
  ASSERT_TRUE(connection->Send(absl::StrCat("OPEN ", *there)).ok());

  // A file of the client's, taken out of its process and read here.
  const std::string file_message = connection->Receive().value_or("");
  const uint64_t file_value = ValueOf(file_message, "FILE");
  ASSERT_NE(file_value, 0u) << file_message;
  absl::StatusOr<NativeHandle> file = connection->TakeHandle(file_value, GENERIC_READ);
  ASSERT_TRUE(file.ok()) << file.status();
  char read_back[32] = {};
  DWORD read = 0;
  ASSERT_TRUE(::ReadFile(file->get(), read_back, sizeof(read_back) - 1, &read, nullptr));
  EXPECT_STREQ(read_back, "from-child");
  // A value that names none of the client's handles is refused (and not echoed).
  absl::StatusOr<NativeHandle> bogus = connection->TakeHandle(0x7ffff0, GENERIC_READ);
  EXPECT_TRUE(absl::IsInvalidArgument(bogus.status())) << bogus.status();
  EXPECT_EQ(bogus.status().message().find("7ffff0"), absl::string_view::npos);

  ASSERT_TRUE(connection->Send("DONE").ok());
  EXPECT_EQ(child->Wait(), 0);
  EXPECT_STREQ(bytes + 64, "child") << "the client mapped the handle it was given";
  EXPECT_TRUE(absl::IsOutOfRange(connection->Receive().status())) << "the client closed";
}

// wine runs these tests in CI; it implements most of Win32 but not all of its refusals.
bool RunningUnderWine() {
  HMODULE ntdll = ::GetModuleHandleW(L"ntdll.dll");
  return ntdll != nullptr && ::GetProcAddress(ntdll, "wine_get_version") != nullptr;
}

TEST(WindowsPipeTest, ANameAlreadyListenedOnIsNotTakenOver) {
  if (RunningUnderWine()) {
    GTEST_SKIP() << "wine does not refuse FILE_FLAG_FIRST_PIPE_INSTANCE on a name in use "
                    "(Windows answers ERROR_ACCESS_DENIED): not verified here";
  }
  const std::string name = absl::StrCat("ddo-os-test-", CurrentProcessId(), "-taken");
  absl::StatusOr<PipeListener> first = PipeListener::Create(name);
  ASSERT_TRUE(first.ok()) << first.status();
  absl::StatusOr<PipeListener> squatter = PipeListener::Create(name);
  EXPECT_TRUE(absl::IsAlreadyExists(squatter.status())) << squatter.status();
}

TEST(WindowsPipeTest, ConnectingWhereNoServerListensIsNotFound) {
  absl::StatusOr<PipeConnection> connection =
      ConnectToPipe(absl::StrCat("ddo-os-test-", CurrentProcessId(), "-nobody"));
  EXPECT_TRUE(absl::IsNotFound(connection.status())) << connection.status();
}

}  // namespace
}  // namespace ddo::os

#endif  // _WIN32
