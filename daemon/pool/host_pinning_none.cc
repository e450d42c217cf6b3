// The host-only build: nothing can be pinned.
#include "daemon/pool/host_pinning.h"

namespace ddo {

bool HostPinningAvailable() { return false; }

absl::Status PinHostRange(char*, uint64_t) {
  return absl::FailedPreconditionError("ddod was built without CUDA: host memory is not pinned");
}

void UnpinHostRange(char*, uint64_t) {}

}  // namespace ddo
