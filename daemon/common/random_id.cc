#include "daemon/common/random_id.h"

#include <sys/random.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "absl/strings/escaping.h"
#include "absl/strings/string_view.h"
#include "daemon/common/logging.h"

namespace ddo {

std::string RandomId() {
  unsigned char bytes[16];
  size_t filled = 0;
  while (filled < sizeof(bytes)) {
    const ssize_t n = ::getrandom(bytes + filled, sizeof(bytes) - filled, 0);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      // getrandom only fails on kernels older than 3.17; ddod cannot hand out guessable ids.
      Logger("server")->critical("getrandom failed: {}", std::strerror(errno));
      std::abort();
    }
    filled += static_cast<size_t>(n);
  }
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(bytes), sizeof(bytes)));
}

}  // namespace ddo
