// NativeHandle's move and release, the same on both systems; what "none" is, and closing, are
// each system's (posix/ and windows/native_handle.cc).
#include "ddo/os/native_handle.h"

namespace ddo::os {

NativeHandle& NativeHandle::operator=(NativeHandle&& other) noexcept {
  if (this != &other) {
    Close();
    raw_ = other.Release();
  }
  return *this;
}

NativeHandle::Raw NativeHandle::Release() {
  const Raw raw = raw_;
  raw_ = None();
  return raw;
}

}  // namespace ddo::os
