// libFuzzer target: the identity socket's request parser (ParseIdentityRequest) on arbitrary
// packets, with 0 to 3 descriptors (the first byte). An accepted request is one of the three
// with a name that cannot leave its directory; a refusal, and the ERR answer built from it, are
// clean text of bounded size.
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "ddo/wire/identity_protocol.h"
#include "tests/fuzz/fuzz_checks.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const int passed_fds = data[0] % 4;
  const absl::string_view packet(reinterpret_cast<const char*>(data + 1), size - 1);
  auto request = ddo::ParseIdentityRequest(packet, passed_fds);
  if (!request.ok()) {
    ddo::CheckMessageIsClean(request.status());
    const std::string answer = ddo::IdentityError(request.status().message());
    ddo::FuzzCheck(answer.size() <= ddo::kIdentityMaxPacketBytes, "an ERR answer fits a packet");
    return 0;
  }
  using Kind = ddo::IdentityRequest::Kind;
  ddo::FuzzCheck((request->kind == Kind::kFile) == (passed_fds == 1),
                 "exactly FILE carries one descriptor");
  if (request->kind != Kind::kHello) {
    const std::string& name = request->name;
    ddo::FuzzCheck(!name.empty() && name.size() <= ddo::kIdentityMaxNameBytes + 1, "name size");
    const size_t first = request->kind == Kind::kOpen ? 1 : 0;
    ddo::FuzzCheck(request->kind != Kind::kOpen || name[0] == '/', "a segment name starts with /");
    for (size_t i = first; i < name.size(); ++i) {
      const auto byte = static_cast<unsigned char>(name[i]);
      ddo::FuzzCheck(byte > 0x20 && byte < 0x7f && byte != '/', "a name is one plain component");
    }
    ddo::FuzzCheck(name.substr(first) != "." && name.substr(first) != "..", "no . or ..");
  }
  return 0;
}
