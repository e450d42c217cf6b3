// File: daemon/identity/caller_registry.h
//
// The callers ddod knows: one entry per open identity-socket connection, found by the token
// that connection was given. An entry holds what the caller handed ddod or was granted:
//   - files: descriptors the caller opened and passed (FILE), each taken once by the request
//     that names its handle;
//   - grants: segments the caller may have opened for it (OPEN), added by the calls that gave
//     the caller the segment's name: shared-memory segments, read-only or read-write, and
//     backing files, read-only (the grant shares the descriptor OPEN serves).
// Everything an entry holds goes when its connection closes.
//
// Thread-safety: all methods may be called from any thread; state is guarded by mu_.
#ifndef DDO_DAEMON_IDENTITY_CALLER_REGISTRY_H_
#define DDO_DAEMON_IDENTITY_CALLER_REGISTRY_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "daemon/identity/caller.h"
#include "daemon/identity/segment_grant.h"
#include "ddo/wire/unique_fd.h"

namespace ddo {

// A file a caller opened and passed: the descriptor and the base name it gave.
struct PassedFile {
  std::string name;
  UniqueFd fd;
};

class CallerRegistry {
 public:
  // Passed files not yet used: per connection, per uid, and in all (each is a descriptor
  // ddod holds open, and descriptors are finite).
  static constexpr size_t kMaxHeldFiles = 256;
  static constexpr size_t kMaxHeldFilesPerUid = 1024;
  static constexpr size_t kMaxHeldFilesInAll = 8192;
  // Segments one caller may be granted at once.
  static constexpr size_t kMaxGrants = 65536;

  CallerRegistry() = default;
  CallerRegistry(const CallerRegistry&) = delete;
  CallerRegistry& operator=(const CallerRegistry&) = delete;

  // A new entry; returns its token (128 random bits, hex).
  std::string Add(const Caller& caller);
  // Drops the entry and everything it holds. Unknown tokens are ignored.
  void Remove(const std::string& token);

  // UNAUTHENTICATED when the token is unknown (never granted, or its connection closed).
  absl::StatusOr<Caller> Find(const std::string& token) const;

  // Keeps a passed file; returns its handle (> 0). RESOURCE_EXHAUSTED past a kMaxHeldFiles* limit.
  absl::StatusOr<uint64_t> AddFile(const std::string& token, PassedFile file);
  // Takes the files with these handles out of the entry (each handle is used once).
  // INVALID_ARGUMENT naming the first unknown handle; nothing is taken then.
  absl::StatusOr<std::vector<PassedFile>> TakeFiles(const std::string& token,
                                                    const std::vector<uint64_t>& handles);

  // Lets the caller open shared-memory segment `shm_name` through OPEN; read-write only if
  // `writable`. A second grant of the same name widens it, never narrows it.
  void Grant(const std::string& token, const std::string& shm_name, bool writable);
  // As above for one grant of any kind. A file grant (SegmentKind::kFile) is read-only
  // whatever its `writable` says, a pipe grant (kPipe) write-only; either replaces an earlier
  // grant of the same name, and one without a descriptor grants nothing.
  void Grant(const std::string& token, const SegmentGrant& grant);
  // Each of `grants` (the rules that make the list: store/segment_grants.h,
  // stream/session_grants.h).
  void Grant(const std::string& token, const std::vector<SegmentGrant>& grants);
  // The grant OPEN serves: FAILED_PRECONDITION unless the segment was granted,
  // PERMISSION_DENIED for read-write access to a read-only grant (every file grant). The
  // message never says whether the segment exists, nor echoes its name.
  absl::StatusOr<SegmentGrant> FindGrant(const std::string& token, const std::string& shm_name,
                                         bool writable) const;
  // The grant OPEN serves: FindGrant's, except that a pipe's (SegmentKind::kPipe) is taken
  // out, so that it is served once and ddod keeps no write end of the pipe afterwards; asked
  // for read-only, it is PERMISSION_DENIED and stays.
  absl::StatusOr<SegmentGrant> ServeGrant(const std::string& token, const std::string& shm_name,
                                          bool writable);
  // FindGrant's status alone.
  absl::Status CheckGrant(const std::string& token, const std::string& shm_name,
                          bool writable) const;

  size_t size() const;

 private:
  struct Entry {
    Caller caller;
    std::map<uint64_t, PassedFile> files;
    uint64_t next_handle = 1;
    std::map<std::string, SegmentGrant> grants;  // by shm_name
  };

  // The grant named `shm_name` of `token`'s entry, if it allows `writable`: FindGrant's errors.
  absl::StatusOr<const SegmentGrant*> FindGrantLocked(const std::string& token,
                                                      const std::string& shm_name,
                                                      bool writable) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  std::map<std::string, Entry> entries_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ddo

#endif  // DDO_DAEMON_IDENTITY_CALLER_REGISTRY_H_
