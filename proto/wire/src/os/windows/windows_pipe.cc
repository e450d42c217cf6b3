#include "ddo/os/windows_pipe.h"

#include <windows.h>

#include "absl/strings/str_cat.h"
#include "owner_only_security.h"
#include "windows_error.h"

namespace ddo::os {
namespace {

std::wstring PipePath(const std::string& name) { return Widen(absl::StrCat("\\\\.\\pipe\\", name)); }

absl::StatusOr<NativeHandle> MakeInstance(const std::string& name, const SegmentAccess& access,
                                          bool first) {
  absl::StatusOr<OwnerOnlySecurity> security = OwnerOnlySecurity::Make(access);
  if (!security.ok()) return security.status();
  const std::wstring path = PipePath(name);
  NativeHandle pipe(::CreateNamedPipeW(
      path.c_str(), PIPE_ACCESS_DUPLEX | (first ? FILE_FLAG_FIRST_PIPE_INSTANCE : 0),
      PIPE_TYPE_MESSAGE | PIPE_READMODE_MESSAGE | PIPE_WAIT | PIPE_REJECT_REMOTE_CLIENTS,
      PIPE_UNLIMITED_INSTANCES, kMaxPipeMessageBytes, kMaxPipeMessageBytes, 0,
      security->attributes()));
  if (!pipe.valid()) {
    const DWORD error = ::GetLastError();
    // The first instance of a name someone else holds fails with ACCESS_DENIED.
    if (first && error == ERROR_ACCESS_DENIED) {
      return absl::AlreadyExistsError(absl::StrCat("the pipe ", name, " exists already"));
    }
    return WindowsError(absl::StrCat("create the pipe ", name), error);
  }
  return pipe;
}

}  // namespace

absl::StatusOr<PipeListener> PipeListener::Create(const std::string& name,
                                                  const SegmentAccess& access) {
  if (absl::Status valid = CheckSegmentName(name); !valid.ok()) return valid;
  absl::StatusOr<NativeHandle> first = MakeInstance(name, access, /*first=*/true);
  if (!first.ok()) return first.status();
  return PipeListener(name, access, *std::move(first));
}

absl::StatusOr<PipeConnection> PipeListener::Accept() {
  if (!::ConnectNamedPipe(next_.get(), nullptr) && ::GetLastError() != ERROR_PIPE_CONNECTED) {
    return WindowsError(absl::StrCat("accept on the pipe ", name_), ::GetLastError());
  }
  absl::StatusOr<NativeHandle> following = MakeInstance(name_, access_, /*first=*/false);
  if (!following.ok()) return following.status();
  NativeHandle connected = std::move(next_);
  next_ = *std::move(following);
  return PipeConnection(std::move(connected), /*server=*/true);
}

absl::StatusOr<PipeConnection> ConnectToPipe(const std::string& name) {
  if (absl::Status valid = CheckSegmentName(name); !valid.ok()) return valid;
  const std::wstring path = PipePath(name);
  NativeHandle pipe(::CreateFileW(path.c_str(), GENERIC_READ | GENERIC_WRITE, 0, nullptr,
                                  OPEN_EXISTING, SECURITY_SQOS_PRESENT | SECURITY_IDENTIFICATION,
                                  nullptr));
  if (!pipe.valid()) return WindowsError(absl::StrCat("connect to the pipe ", name), ::GetLastError());
  DWORD mode = PIPE_READMODE_MESSAGE;
  if (!::SetNamedPipeHandleState(pipe.get(), &mode, nullptr, nullptr)) {
    return WindowsError(absl::StrCat("read messages from the pipe ", name), ::GetLastError());
  }
  return PipeConnection(std::move(pipe), /*server=*/false);
}

absl::Status PipeConnection::Send(absl::string_view message) {
  if (message.size() > kMaxPipeMessageBytes) {
    return absl::InvalidArgumentError(absl::StrCat("a message has at most ",
                                                   kMaxPipeMessageBytes, " bytes"));
  }
  DWORD written = 0;
  if (!::WriteFile(pipe_.get(), message.data(), static_cast<DWORD>(message.size()), &written,
                   nullptr) ||
      written != message.size()) {
    return WindowsError("write to the pipe", ::GetLastError());
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> PipeConnection::Receive() {
  std::string message(kMaxPipeMessageBytes, '\0');
  DWORD read = 0;
  if (::ReadFile(pipe_.get(), message.data(), kMaxPipeMessageBytes, &read, nullptr)) {
    message.resize(read);
    return message;
  }
  const DWORD error = ::GetLastError();
  if (error == ERROR_MORE_DATA) {
    // The rest of the oversized message is read and dropped: the next Receive starts clean.
    while (!::ReadFile(pipe_.get(), message.data(), kMaxPipeMessageBytes, &read, nullptr) &&
           ::GetLastError() == ERROR_MORE_DATA) {
    }
    return absl::InvalidArgumentError(
        absl::StrCat("a message longer than ", kMaxPipeMessageBytes, " bytes"));
  }
  if (error == ERROR_BROKEN_PIPE || error == ERROR_PIPE_NOT_CONNECTED) {
    return absl::OutOfRangeError("the other end closed the pipe");
  }
  return WindowsError("read from the pipe", error);
}

absl::StatusOr<PipePeer> PipeConnection::Peer() const {
  PipePeer peer;
  ULONG pid = 0;
  const BOOL known = server_ ? ::GetNamedPipeClientProcessId(pipe_.get(), &pid)
                             : ::GetNamedPipeServerProcessId(pipe_.get(), &pid);
  if (!known) return WindowsError("learn the pipe's peer", ::GetLastError());
  peer.pid = pid;
  if (!server_) return peer;
  // The client's account: its token, read while impersonating it (at the identification level
  // it connected with), then back to this process's own.
  if (!::ImpersonateNamedPipeClient(pipe_.get())) {
    return WindowsError("read the pipe client's account", ::GetLastError());
  }
  HANDLE raw_token = nullptr;
  const BOOL opened = ::OpenThreadToken(::GetCurrentThread(), TOKEN_QUERY, TRUE, &raw_token);
  const DWORD error = ::GetLastError();
  ::RevertToSelf();
  if (!opened) return WindowsError("read the pipe client's token", error);
  NativeHandle token(raw_token);
  absl::StatusOr<std::wstring> sid = TokenUserSid(token.get());
  if (!sid.ok()) return sid.status();
  peer.user_sid = Narrow(*sid);
  return peer;
}

absl::StatusOr<NativeHandle> PipeConnection::PeerProcess(uint32_t access) const {
  if (!server_) {
    return absl::FailedPreconditionError("only the pipe's server passes handles");
  }
  absl::StatusOr<PipePeer> peer = Peer();
  if (!peer.ok()) return peer.status();
  NativeHandle process(::OpenProcess(access, FALSE, static_cast<DWORD>(peer->pid)));
  if (!process.valid()) {
    return WindowsError(absl::StrCat("open the pipe client's process ", peer->pid),
                        ::GetLastError());
  }
  return process;
}

absl::StatusOr<uint64_t> PipeConnection::SendHandle(const NativeHandle& handle,
                                                    uint32_t access) const {
  absl::StatusOr<NativeHandle> process = PeerProcess(PROCESS_DUP_HANDLE);
  if (!process.ok()) return process.status();
  HANDLE there = nullptr;
  if (!::DuplicateHandle(::GetCurrentProcess(), handle.get(), process->get(), &there, access,
                         FALSE, 0)) {
    return WindowsError("pass a handle to the pipe client", ::GetLastError());
  }
  return reinterpret_cast<uint64_t>(there);
}

absl::StatusOr<NativeHandle> PipeConnection::TakeHandle(uint64_t value, uint32_t access) const {
  absl::StatusOr<NativeHandle> process = PeerProcess(PROCESS_DUP_HANDLE);
  if (!process.ok()) return process.status();
  HANDLE here = nullptr;
  if (!::DuplicateHandle(process->get(), reinterpret_cast<HANDLE>(value), ::GetCurrentProcess(),
                         &here, access, FALSE, 0)) {
    const DWORD error = ::GetLastError();
    if (error == ERROR_INVALID_HANDLE) {
      return absl::InvalidArgumentError("the pipe client has no such handle");
    }
    return WindowsError("take a handle from the pipe client", error);
  }
  return NativeHandle(here);
}

}  // namespace ddo::os
