// File: daemon/pool/shared_segment.h
//
// One POSIX shared-memory segment of the host pool, mapped read-write into ddod. Clients open
// the same name (/dev/shm/<name>) to upload into it or to attach read-only. The segment is
// created owner-only (0600) with O_EXCL, so a name can never be taken over by someone else.
//
// Thread-safety: the object is immutable after construction; the bytes it maps are shared
// with other processes and are synchronised by the store's protocol, not here.
#ifndef DDO_DAEMON_POOL_SHARED_SEGMENT_H_
#define DDO_DAEMON_POOL_SHARED_SEGMENT_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "daemon/common/file_system.h"

namespace ddo {

// Segment sizes are multiples of 2 MiB: friendly to transparent huge pages and to DMA.
inline constexpr uint64_t kSegmentGranularity = 2ull << 20;

uint64_t RoundUpToSegmentGranularity(uint64_t bytes);

// What SharedSegment::Create does with a new segment's pages.
enum class SegmentPages {
  // Nothing: the caller allocates each range (fallocate) before it touches it.
  kNone,
  // Reserved in /dev/shm (fallocate), neither mapped nor zeroed: for segments written through
  // their descriptor (pwrite), where a page written whole is never zeroed at all. A page
  // first touched through a mapping is zeroed then.
  kReserved,
  // Allocated, zeroed and mapped by several threads (MADV_POPULATE_WRITE): for segments
  // written through the mapping.
  kPopulated,
};

class SharedSegment {
 public:
  // Creates and maps a new segment of `size` bytes (a multiple of kSegmentGranularity), its
  // pages reserved or populated up front as `pages` says (populated by `threads` threads).
  // AlreadyExists when the name is taken; ResourceExhausted when /dev/shm has no room (never
  // a SIGBUS later, unless `pages` is kNone). On any failure the half-made segment is removed
  // from /dev/shm again. Every system call goes through `fs` (nullptr:
  // FileSystem::Default()), which must outlive the segment. `progress` (optional) counts the
  // bytes allocated; cancelling it ends the call with CANCELLED.
  static absl::StatusOr<SharedSegment> Create(const std::string& name, uint64_t size,
                                              int threads = 1, FileSystem* fs = nullptr,
                                              WorkProgress* progress = nullptr,
                                              SegmentPages pages = SegmentPages::kPopulated);

  // Maps an existing segment (adoption after a restart); its size is whatever the file has.
  // DataLoss when it is empty; PermissionDenied when it is not an owner-only segment of ours.
  static absl::StatusOr<SharedSegment> Open(const std::string& name, FileSystem* fs = nullptr);

  SharedSegment(SharedSegment&& other) noexcept;
  SharedSegment& operator=(SharedSegment&& other) noexcept;
  SharedSegment(const SharedSegment&) = delete;
  SharedSegment& operator=(const SharedSegment&) = delete;
  // Unmaps; the segment itself stays until Unlink().
  ~SharedSegment();

  // Removes the name from /dev/shm; the mapping stays valid until destruction.
  absl::Status Unlink() const;

  // Cuts the segment to its first `size` bytes (a multiple of kSegmentGranularity, at most
  // size()): the file is truncated, which frees the pages past it, and the tail of the
  // mapping is unmapped. Only for a segment nobody else has mapped or registered (the
  // pre-faulted reserve's, before it is handed out).
  absl::Status Shrink(uint64_t size);

  const std::string& name() const { return name_; }
  char* data() const { return data_; }
  uint64_t size() const { return size_; }

 private:
  SharedSegment(FileSystem* fs, std::string name, char* data, uint64_t size)
      : fs_(fs), name_(std::move(name)), data_(data), size_(size) {}

  FileSystem* fs_ = nullptr;
  std::string name_;
  char* data_ = nullptr;
  uint64_t size_ = 0;
};

// The file behind a segment name ("/ddo-x" -> "/dev/shm/ddo-x").
std::string SegmentPath(const std::string& name);

}  // namespace ddo

#endif  // DDO_DAEMON_POOL_SHARED_SEGMENT_H_
