// File: proto/wire/include/ddo/wire/identity_protocol.h
//
// The messages of the identity socket (docs/security.md): one text packet each, fields
// separated by single spaces. Parsing is strict and bounded; nothing of a refused request
// is echoed back beyond a short escaped prefix.
//
// Thread-safety: pure functions.
#ifndef DDO_WIRE_IDENTITY_PROTOCOL_H_
#define DDO_WIRE_IDENTITY_PROTOCOL_H_

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ddo {

// Largest packet either side sends.
inline constexpr size_t kIdentityMaxPacketBytes = 4096;
// Longest name in FILE (a base name) and OPEN (a shared-memory name).
inline constexpr size_t kIdentityMaxNameBytes = 255;

struct IdentityRequest {
  enum class Kind { kHello, kFile, kOpen };
  Kind kind = Kind::kHello;
  std::string name;       // FILE: the file's base name; OPEN: the segment's name
  bool writable = false;  // OPEN: "rw"
};

// INVALID_ARGUMENT naming what was wrong. `passed_fds` is how many descriptors came with the
// packet: FILE needs exactly one, the others none.
absl::StatusOr<IdentityRequest> ParseIdentityRequest(absl::string_view packet, int passed_fds);

// Where the identity socket of the gRPC socket at `grpc_socket_path` is: "<path>.id".
std::string IdentitySocketPath(const std::string& grpc_socket_path);

// "OK", "OK <value>", "ERR <message>" (the message escaped and cut to fit a packet).
std::string IdentityOk(absl::string_view value = "");
std::string IdentityError(absl::string_view message);

}  // namespace ddo

#endif  // DDO_WIRE_IDENTITY_PROTOCOL_H_
