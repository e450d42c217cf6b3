// The system half of NativeHandle (native_handle.cc has the rest).
#include "ddo/os/native_handle.h"

#include <windows.h>

namespace ddo::os {

NativeHandle::Raw NativeHandle::None() { return nullptr; }

bool NativeHandle::valid() const { return raw_ != nullptr && raw_ != INVALID_HANDLE_VALUE; }

void NativeHandle::Close() {
  if (valid()) ::CloseHandle(raw_);
  raw_ = None();
}

}  // namespace ddo::os
