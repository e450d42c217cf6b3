#include "daemon/common/random_id.h"

#include <cstdlib>

#include "absl/strings/escaping.h"
#include "absl/strings/string_view.h"
#include "daemon/common/logging.h"
#include "ddo/os/system_facts.h"

namespace ddo {

std::string RandomId() {
  unsigned char bytes[16];
  if (const absl::Status filled = os::FillRandomBytes(bytes, sizeof(bytes)); !filled.ok()) {
    // ddod cannot hand out guessable ids.
    Logger("server")->critical("{}", filled.message());
    std::abort();
  }
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(bytes), sizeof(bytes)));
}

}  // namespace ddo
