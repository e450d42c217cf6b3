#include "ddo/os/system_facts.h"

// clang-format off: windows.h first, bcrypt.h needs its types.
#include <windows.h>
#include <bcrypt.h>
// clang-format on

#include <algorithm>

#include "absl/strings/str_format.h"

namespace ddo::os {

absl::Status FillRandomBytes(void* bytes, size_t size) {
  auto* out = static_cast<unsigned char*>(bytes);
  while (size > 0) {
    const ULONG chunk = static_cast<ULONG>(std::min<size_t>(size, 1u << 30));
    const NTSTATUS status =
        ::BCryptGenRandom(nullptr, out, chunk, BCRYPT_USE_SYSTEM_PREFERRED_RNG);
    if (!BCRYPT_SUCCESS(status)) {
      return absl::InternalError(absl::StrFormat("BCryptGenRandom failed: NTSTATUS 0x%08x",
                                                 static_cast<unsigned long>(status)));
    }
    out += chunk;
    size -= chunk;
  }
  return absl::OkStatus();
}

bool StderrIsSystemJournal() { return false; }

}  // namespace ddo::os
