// File: proto/wire/include/ddo/os/native_handle.h
//
// NativeHandle: an owned operating-system handle, closed by its destructor: a file descriptor
// on POSIX, a HANDLE on Windows. The platform layer's objects hold one; callers that must
// hand it to the system (poll, WaitForMultipleObjects, passing it to another process) read
// get().
//
// Thread-safety: a value one thread owns.
#ifndef DDO_OS_NATIVE_HANDLE_H_
#define DDO_OS_NATIVE_HANDLE_H_

#include <cstdint>

namespace ddo::os {

class NativeHandle {
 public:
#ifdef _WIN32
  using Raw = void*;  // HANDLE; null and INVALID_HANDLE_VALUE are both "none"
#else
  using Raw = int;  // a file descriptor; negative is "none"
#endif

  NativeHandle() = default;
  explicit NativeHandle(Raw raw) : raw_(raw) {}
  NativeHandle(NativeHandle&& other) noexcept : raw_(other.Release()) {}
  NativeHandle& operator=(NativeHandle&& other) noexcept;
  NativeHandle(const NativeHandle&) = delete;
  NativeHandle& operator=(const NativeHandle&) = delete;
  ~NativeHandle() { Close(); }

  Raw get() const { return raw_; }
  bool valid() const;
  // Gives up ownership: the caller closes what is returned.
  Raw Release();
  void Close();

 private:
  static Raw None();

  Raw raw_ = None();
};

}  // namespace ddo::os

#endif  // DDO_OS_NATIVE_HANDLE_H_
