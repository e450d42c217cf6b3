// File: daemon/store/file_identity.h
//
// Which file, in which state: what fstat says of a descriptor. ddod remembers the identities
// of the files a component was read from; a caller that passes a descriptor of the very same
// unchanged file (same device, inode, size, modification and change times) proves it may read
// those bytes, and is served the component warm (docs/security.md).
//
// Thread-safety: plain values and a pure function.
#ifndef DDO_DAEMON_STORE_FILE_IDENTITY_H_
#define DDO_DAEMON_STORE_FILE_IDENTITY_H_

#include <cstdint>

#include "absl/status/statusor.h"

namespace ddo {

struct FileIdentity {
  uint64_t device = 0;
  uint64_t inode = 0;
  uint64_t size = 0;
  int64_t modified_ns = 0;
  int64_t changed_ns = 0;
  bool operator==(const FileIdentity& other) const {
    return device == other.device && inode == other.inode && size == other.size &&
           modified_ns == other.modified_ns && changed_ns == other.changed_ns;
  }
  bool operator<(const FileIdentity& other) const {
    return device != other.device ? device < other.device : inode < other.inode;
  }
};

// fstat of an open descriptor.
absl::StatusOr<FileIdentity> IdentityOfFile(int fd);

}  // namespace ddo

#endif  // DDO_DAEMON_STORE_FILE_IDENTITY_H_
