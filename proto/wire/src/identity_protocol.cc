#include "ddo/wire/identity_protocol.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "ddo/wire/display_text.h"

namespace ddo {
namespace {

// Printable ASCII without space or '/', and not "." or "..".
bool IsPlainName(absl::string_view name) {
  if (name.empty() || name.size() > kIdentityMaxNameBytes || name == "." || name == "..") {
    return false;
  }
  for (unsigned char c : name) {
    if (c <= 0x20 || c >= 0x7f || c == '/') return false;
  }
  return true;
}

// A shared-memory name as ddod makes them: "/" and then a plain name.
bool IsSegmentName(absl::string_view name) {
  return name.size() >= 2 && name[0] == '/' && IsPlainName(name.substr(1));
}

}  // namespace

absl::StatusOr<IdentityRequest> ParseIdentityRequest(absl::string_view packet, int passed_fds) {
  if (packet.size() > kIdentityMaxPacketBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("a request is at most ", kIdentityMaxPacketBytes, " bytes"));
  }
  const std::vector<absl::string_view> fields = absl::StrSplit(packet, ' ');
  const absl::string_view verb = fields[0];
  IdentityRequest request;
  if (verb == "HELLO") {
    if (fields.size() != 2 || fields[1] != "1") {
      return absl::InvalidArgumentError("HELLO takes the protocol version: 'HELLO 1'");
    }
    request.kind = IdentityRequest::Kind::kHello;
  } else if (verb == "FILE") {
    if (fields.size() != 2 || !IsPlainName(fields[1])) {
      return absl::InvalidArgumentError(absl::StrCat(
          "FILE takes one base name: printable, no spaces or '/', at most ",
          kIdentityMaxNameBytes, " bytes"));
    }
    if (passed_fds != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("FILE carries exactly one descriptor (SCM_RIGHTS); this one carried ",
                       passed_fds));
    }
    request.kind = IdentityRequest::Kind::kFile;
    request.name = std::string(fields[1]);
    return request;
  } else if (verb == "OPEN") {
    if (fields.size() != 3 || !IsSegmentName(fields[1]) ||
        (fields[2] != "ro" && fields[2] != "rw")) {
      return absl::InvalidArgumentError("OPEN takes a segment name and ro or rw");
    }
    request.kind = IdentityRequest::Kind::kOpen;
    request.name = std::string(fields[1]);
    request.writable = fields[2] == "rw";
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown request '", EscapeForDisplay(verb, 16), "': HELLO, FILE or OPEN"));
  }
  if (passed_fds != 0) {
    return absl::InvalidArgumentError("only FILE carries a descriptor");
  }
  return request;
}

std::string IdentitySocketPath(const std::string& grpc_socket_path) {
  return absl::StrCat(grpc_socket_path, ".id");
}

std::string IdentityOk(absl::string_view value) {
  return value.empty() ? std::string("OK") : absl::StrCat("OK ", value);
}

std::string IdentityError(absl::string_view message) {
  return absl::StrCat("ERR ", EscapeForDisplay(message, kIdentityMaxPacketBytes / 2));
}

}  // namespace ddo
