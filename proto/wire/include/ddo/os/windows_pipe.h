// File: proto/wire/include/ddo/os/windows_pipe.h
//
// Caller identity and passing handles on Windows (docs/windows.md): the identity socket's role
// (on Linux a Unix socket with SO_PEERCRED and SCM_RIGHTS, proto/wire's seqpacket and
// daemon/identity) played by a local named pipe "\\.\pipe\<name>" in message mode:
//
//   - the pipe's DACL admits the creating account (and a group) only, it refuses remote
//     clients, and its first instance is created with FILE_FLAG_FIRST_PIPE_INSTANCE, so a
//     process that took the name first is never served (the listener fails instead);
//   - the server learns who connected from the system: the client's process id
//     (GetNamedPipeClientProcessId) and account SID (its token, read while impersonating it at
//     the identification level the client connects with: it cannot act as the client);
//   - handles cross by DuplicateHandle: the server puts a mapping's handle into the client's
//     process (SendHandle) and takes a file handle out of it (TakeHandle), with the access it
//     names; the packets carry the handle values. Both need PROCESS_DUP_HANDLE on the client's
//     process, which the client's own account and LocalSystem have.
//
// Thread-safety: a listener or connection is used by one thread at a time.
#ifndef DDO_OS_WINDOWS_PIPE_H_
#define DDO_OS_WINDOWS_PIPE_H_

#ifdef _WIN32

#include <cstdint>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ddo/os/native_handle.h"
#include "ddo/os/process_watch.h"
#include "ddo/os/shared_memory.h"

namespace ddo::os {

// Who is at the other end of a pipe, as the system says.
struct PipePeer {
  ProcessId pid = 0;
  std::string user_sid;  // "S-1-5-21-..."; empty on the client's side (the server's is not read)
};

class PipeConnection {
 public:
  PipeConnection(PipeConnection&&) noexcept = default;
  PipeConnection& operator=(PipeConnection&&) noexcept = default;

  // One message each way (at most kMaxPipeMessageBytes). Receive: OutOfRange when the peer
  // closed, InvalidArgument for a longer message (which is discarded).
  absl::Status Send(absl::string_view message);
  absl::StatusOr<std::string> Receive();

  // The server's view of the client: its pid and account (the client's view: the server's pid).
  absl::StatusOr<PipePeer> Peer() const;

  // Server side: duplicates `handle` into the peer's process with `access` (a FILE_MAP_* or
  // FILE_* mask) and returns its value there, for a message to carry.
  absl::StatusOr<uint64_t> SendHandle(const NativeHandle& handle, uint32_t access) const;
  // Server side: duplicates the peer's handle `value` into this process with `access`.
  // InvalidArgument when the value names no handle of the peer's.
  absl::StatusOr<NativeHandle> TakeHandle(uint64_t value, uint32_t access) const;

 private:
  friend class PipeListener;
  friend absl::StatusOr<PipeConnection> ConnectToPipe(const std::string& name);
  PipeConnection(NativeHandle pipe, bool server) : pipe_(std::move(pipe)), server_(server) {}

  absl::StatusOr<NativeHandle> PeerProcess(uint32_t access) const;

  NativeHandle pipe_;
  bool server_ = false;
};

class PipeListener {
 public:
  // Creates the pipe `name` (a segment name's rules) with the owner-only DACL of `access`.
  // AlreadyExists when any process has the name already.
  static absl::StatusOr<PipeListener> Create(const std::string& name,
                                             const SegmentAccess& access = {});

  PipeListener(PipeListener&&) noexcept = default;
  PipeListener& operator=(PipeListener&&) noexcept = default;

  // Waits for the next client and returns its connection (the listener makes the next
  // instance of the pipe for the client after it).
  absl::StatusOr<PipeConnection> Accept();

 private:
  PipeListener(std::string name, SegmentAccess access, NativeHandle next)
      : name_(std::move(name)), access_(std::move(access)), next_(std::move(next)) {}

  std::string name_;
  SegmentAccess access_;
  NativeHandle next_;  // the instance the next client connects to
};

// The largest message either side sends (the identity protocol's packet).
inline constexpr uint32_t kMaxPipeMessageBytes = 4096;

// Connects to the pipe `name` at the identification level: the server can read this
// process's account, not act as it. NotFound when no server listens.
absl::StatusOr<PipeConnection> ConnectToPipe(const std::string& name);

}  // namespace ddo::os

#endif  // _WIN32

#endif  // DDO_OS_WINDOWS_PIPE_H_
