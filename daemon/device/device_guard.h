// File: daemon/device/device_guard.h
//
// Makes a device current for the scope and restores the previous one (CUDA builds only).
// Unlike guards that ignore errors, Create fails when the device cannot be made current.
//
// Thread-safety: a guard belongs to the thread that created it (the current device is per
// thread); never hand one to another thread.
#ifndef DDO_DAEMON_DEVICE_DEVICE_GUARD_H_
#define DDO_DAEMON_DEVICE_DEVICE_GUARD_H_

#include "absl/status/statusor.h"

namespace ddo {

class DeviceGuard {
 public:
  static absl::StatusOr<DeviceGuard> Create(int ordinal);
  DeviceGuard(DeviceGuard&& other) noexcept : previous_(other.previous_) { other.previous_ = -1; }
  DeviceGuard& operator=(DeviceGuard&&) = delete;
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;
  ~DeviceGuard();

 private:
  explicit DeviceGuard(int previous) : previous_(previous) {}
  int previous_ = -1;
};

}  // namespace ddo

#endif  // DDO_DAEMON_DEVICE_DEVICE_GUARD_H_
