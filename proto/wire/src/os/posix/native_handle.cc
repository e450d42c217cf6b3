// The system half of NativeHandle (native_handle.cc has the rest).
#include "ddo/os/native_handle.h"

#include <unistd.h>

namespace ddo::os {

NativeHandle::Raw NativeHandle::None() { return -1; }

bool NativeHandle::valid() const { return raw_ >= 0; }

void NativeHandle::Close() {
  if (valid()) ::close(raw_);  // nothing to do on failure: the descriptor is gone either way
  raw_ = None();
}

}  // namespace ddo::os
