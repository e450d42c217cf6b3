#include "daemon/common/xxh3_hasher.h"

#include "absl/strings/str_format.h"

namespace ddo {

std::string Xxh3Hasher::HexDigest() const { return absl::StrFormat("%016x", Digest()); }

}  // namespace ddo
