// File: proto/wire/include/ddo/os/shared_memory.h
//
// Named shared-memory segments, the platform layer's first concern (docs/windows.md): what
// ddod's pool, control blocks and doorbells are made of, and what a runner maps.
//
//   POSIX:   shm_open("/<name>") with O_CREAT | O_EXCL | O_NOFOLLOW, mode 0600 (0660 with a
//            group), ftruncate, mmap. The segment lives until Remove (a ddod that dies leaves
//            it for the next one to adopt or discard).
//   Windows: CreateFileMappingW over the paging file, named "Local\<name>" (or "Global\<name>"
//            for a service whose runners sit in other sessions), with a security descriptor
//            whose DACL grants the creator's SID (and the group's, when given) and no one else;
//            MapViewOfFile. The name goes with the last handle: Remove has nothing to do, and a
//            segment does not outlive every process that holds it.
//
// A name is 1-200 characters of [A-Za-z0-9._-] (what both systems accept in both namespaces).
//
// Thread-safety: a SharedMemory or MappedView is a value one thread owns; distinct objects
// may be used from any threads. The bytes are shared with other processes: callers order
// their accesses themselves.
#ifndef DDO_OS_SHARED_MEMORY_H_
#define DDO_OS_SHARED_MEMORY_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ddo/os/native_handle.h"

namespace ddo::os {

// Who may open a segment besides its creator.
struct SegmentAccess {
  // A group whose members may map it too (POSIX: its gid and mode 0660; Windows: its SID in
  // the DACL), by name; none: the creator only.
  std::optional<std::string> group;
  // Windows only: "Global\" (visible across sessions: a service and its users' runners;
  // needs SeCreateGlobalPrivilege) rather than "Local\" (this logon session).
  bool global_namespace = false;
};

// A view of a segment mapped into this process; unmapped by the destructor. Move-only.
class MappedView {
 public:
  MappedView() = default;
  MappedView(MappedView&& other) noexcept;
  MappedView& operator=(MappedView&& other) noexcept;
  MappedView(const MappedView&) = delete;
  MappedView& operator=(const MappedView&) = delete;
  ~MappedView();

  void* data() const { return data_; }
  uint64_t size() const { return size_; }

 private:
  friend class SharedMemory;
  MappedView(void* data, uint64_t size) : data_(data), size_(size) {}
  void Reset();

  void* data_ = nullptr;
  uint64_t size_ = 0;
};

// An open named segment. Move-only; closing it (the destructor) keeps the segment.
class SharedMemory {
 public:
  // Creates the segment `name` of `bytes` (> 0), zero-filled. AlreadyExists when the name is
  // taken (never opens someone else's segment); InvalidArgument for a bad name or size;
  // NotFound for an unknown group.
  static absl::StatusOr<SharedMemory> Create(const std::string& name, uint64_t bytes,
                                             const SegmentAccess& access = {});
  // Opens an existing segment. NotFound when there is none, PermissionDenied when its
  // security does not admit this process.
  static absl::StatusOr<SharedMemory> Open(const std::string& name, bool writable,
                                           bool global_namespace = false);
  // Deletes the name (POSIX); mappings and open objects stay valid. NotFound when there is no
  // such segment. On Windows a no-op (OK): the name goes with the last handle.
  static absl::Status Remove(const std::string& name);

  SharedMemory(SharedMemory&&) noexcept = default;
  SharedMemory& operator=(SharedMemory&&) noexcept = default;
  SharedMemory(const SharedMemory&) = delete;
  SharedMemory& operator=(const SharedMemory&) = delete;
  ~SharedMemory() = default;

  // Maps the whole segment (read-only unless `writable`, which the segment must have been
  // opened with).
  absl::StatusOr<MappedView> Map(bool writable) const;

  const std::string& name() const { return name_; }
  // The segment's size: as created on POSIX; rounded up to whole pages on Windows, which
  // keeps no exact size.
  uint64_t size() const { return size_; }
  bool writable() const { return writable_; }
  const NativeHandle& handle() const { return handle_; }

 private:
  SharedMemory(std::string name, NativeHandle handle, uint64_t size, bool writable)
      : name_(std::move(name)), handle_(std::move(handle)), size_(size), writable_(writable) {}

  std::string name_;
  NativeHandle handle_;
  uint64_t size_ = 0;
  bool writable_ = false;
};

// InvalidArgument unless `name` is a valid segment name (see above).
absl::Status CheckSegmentName(const std::string& name);

}  // namespace ddo::os

#endif  // DDO_OS_SHARED_MEMORY_H_
