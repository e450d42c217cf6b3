// File: proto/wire/src/os/windows/owner_only_security.h
//
// The security every named object of the platform layer is created with on Windows: a
// protected DACL (no inherited entries) that grants the creating account everything and, when
// given, a group read and write; no one else has an entry, so no one else gets in. The
// equivalent of mode 0600 (0660) on POSIX.
//
// Thread-safety: a value one thread owns.
#ifndef DDO_OS_WINDOWS_OWNER_ONLY_SECURITY_H_
#define DDO_OS_WINDOWS_OWNER_ONLY_SECURITY_H_

#include <windows.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "ddo/os/shared_memory.h"

namespace ddo::os {

class OwnerOnlySecurity {
 public:
  // For this process's account and `access.group`. NotFound for an unknown group.
  static absl::StatusOr<OwnerOnlySecurity> Make(const SegmentAccess& access);

  // What the Create* calls take; valid while this object lives.
  SECURITY_ATTRIBUTES* attributes() { return &attributes_; }

 private:
  struct LocalFreeDeleter {
    void operator()(void* memory) const { ::LocalFree(memory); }
  };

  explicit OwnerOnlySecurity(void* descriptor);

  std::unique_ptr<void, LocalFreeDeleter> descriptor_;
  SECURITY_ATTRIBUTES attributes_{};
};

// The SID ("S-1-5-21-...") of the account `token` (a TOKEN_QUERY handle) belongs to.
absl::StatusOr<std::wstring> TokenUserSid(HANDLE token);

}  // namespace ddo::os

#endif  // DDO_OS_WINDOWS_OWNER_ONLY_SECURITY_H_
