// File: daemon/common/file_system.h
//
// The seam between ddod and the file and shared-memory system calls of the pool and the
// store, in the manner of LevelDB's Env: every such call goes through a FileSystem, so that a
// test can put a FaultInjectingFileSystem in place of the real one and make a call fail
// (ENOSPC, EIO, EMFILE, EACCES, ...) or a read come up short, and see what the caller does.
//
// FileSystem::Default() is the real one (PosixFileSystem), process-wide, never destroyed.
// Components take a `FileSystem*` in their options; nullptr means Default().
//
// Every method reports a failure as PosixError(context, errno) (ddo/wire/posix_error.h):
// the message names the operation, the file (`name`, for the methods that take a descriptor)
// and the system's words for the errno. EINTR is retried inside, never returned.
//
// Thread-safety: every FileSystem may be called from any thread at once.
#ifndef DDO_DAEMON_COMMON_FILE_SYSTEM_H_
#define DDO_DAEMON_COMMON_FILE_SYSTEM_H_

#include <sys/stat.h>
#include <sys/types.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "daemon/common/work_progress.h"
#include "ddo/wire/unique_fd.h"

namespace ddo {

class FileSystem {
 public:
  FileSystem() = default;
  FileSystem(const FileSystem&) = delete;
  FileSystem& operator=(const FileSystem&) = delete;
  virtual ~FileSystem() = default;

  // The real file system, shared by the whole process.
  static FileSystem* Default();

  // shm_open(3): a descriptor of the shared-memory segment `name` ("/ddo-...").
  virtual absl::StatusOr<UniqueFd> ShmOpen(const std::string& name, int flags, mode_t mode) = 0;
  // shm_unlink(3). NotFound when there is no such segment.
  virtual absl::Status ShmUnlink(const std::string& name) = 0;

  // open(2).
  virtual absl::StatusOr<UniqueFd> Open(const std::string& path, int flags, mode_t mode) = 0;
  // ftruncate(2) to `size` bytes.
  virtual absl::Status Truncate(int fd, uint64_t size, absl::string_view name) = 0;
  // Allocates every page of a shared file of `size` bytes that is mapped read-write at `data`,
  // with up to `threads` threads: MADV_POPULATE_WRITE, or posix_fallocate(3) on kernels
  // without it. ResourceExhausted (ENOSPC) when the file system has no room: after this,
  // touching the pages never raises SIGBUS. `progress`, when given, counts the bytes
  // allocated, and Cancelled is returned soon after it is cancelled.
  virtual absl::Status Allocate(int fd, char* data, uint64_t size, int threads,
                                absl::string_view name, WorkProgress* progress) = 0;
  // Reserves every page of the shared file `fd` of `size` bytes without mapping or zeroing
  // them (fallocate(2)): ResourceExhausted (ENOSPC) when the file system has no room; after
  // this, neither a write nor a touch of a mapping raises SIGBUS. A page written whole
  // through the descriptor (WriteAt) is never zeroed; one first touched through a mapping is
  // zeroed then. Unimplemented where the file system cannot (the caller falls back to
  // Allocate). `progress` and cancelling as for Allocate.
  virtual absl::Status ReserveSpace(int fd, uint64_t size, absl::string_view name,
                                    WorkProgress* progress) = 0;
  // fstat(2).
  virtual absl::StatusOr<struct stat> Stat(int fd, absl::string_view name) = 0;
  // mmap(2) of `size` bytes from offset 0, shared, read-write; Unmap (munmap(2)) undoes it.
  virtual absl::StatusOr<char*> Map(int fd, uint64_t size, absl::string_view name) = 0;
  virtual void Unmap(char* data, uint64_t size) = 0;
  // One pread(2) of at most `bytes` at `offset`: the bytes read, 0 at the end of the file.
  // Callers loop; fewer bytes than asked for is not an error.
  virtual absl::StatusOr<size_t> Read(int fd, uint64_t offset, char* destination, size_t bytes,
                                      absl::string_view name) = 0;
  // Copies at most `bytes` from `from` at `offset` to `to` at the same offset, in the kernel
  // (copy_file_range(2), page to page: nothing is mapped, so nothing faults; pread/pwrite
  // through a buffer where the kernel cannot): the bytes copied, 0 at the end of `from`.
  // Callers loop; fewer bytes than asked for is not an error. ResourceExhausted (ENOSPC) when
  // `to`'s file system is full: a write, never a SIGBUS. `name` names `from` in messages.
  virtual absl::StatusOr<size_t> CopyRange(int from, int to, uint64_t offset, size_t bytes,
                                           absl::string_view name) = 0;
  // write(2) of all `bytes`, looping over partial writes.
  virtual absl::Status Write(int fd, const char* data, size_t bytes, absl::string_view name) = 0;
  // pwrite(2) of all `bytes` at `offset`, looping over partial writes; ResourceExhausted
  // (ENOSPC) when the file system is full. Counted and failed as FileOp::kWrite.
  virtual absl::Status WriteAt(int fd, uint64_t offset, const char* data, size_t bytes,
                               absl::string_view name) = 0;
  // fsync(2).
  virtual absl::Status Sync(int fd, absl::string_view name) = 0;
  // rename(2) and unlink(2).
  virtual absl::Status Rename(const std::string& from, const std::string& to) = 0;
  virtual absl::Status Unlink(const std::string& path) = 0;
};

// The real system calls.
class PosixFileSystem : public FileSystem {
 public:
  absl::StatusOr<UniqueFd> ShmOpen(const std::string& name, int flags, mode_t mode) override;
  absl::Status ShmUnlink(const std::string& name) override;
  absl::StatusOr<UniqueFd> Open(const std::string& path, int flags, mode_t mode) override;
  absl::Status Truncate(int fd, uint64_t size, absl::string_view name) override;
  absl::Status Allocate(int fd, char* data, uint64_t size, int threads, absl::string_view name,
                        WorkProgress* progress) override;
  absl::Status ReserveSpace(int fd, uint64_t size, absl::string_view name,
                            WorkProgress* progress) override;
  absl::StatusOr<struct stat> Stat(int fd, absl::string_view name) override;
  absl::StatusOr<char*> Map(int fd, uint64_t size, absl::string_view name) override;
  void Unmap(char* data, uint64_t size) override;
  absl::StatusOr<size_t> Read(int fd, uint64_t offset, char* destination, size_t bytes,
                              absl::string_view name) override;
  absl::StatusOr<size_t> CopyRange(int from, int to, uint64_t offset, size_t bytes,
                                   absl::string_view name) override;
  absl::Status Write(int fd, const char* data, size_t bytes, absl::string_view name) override;
  absl::Status WriteAt(int fd, uint64_t offset, const char* data, size_t bytes,
                       absl::string_view name) override;
  absl::Status Sync(int fd, absl::string_view name) override;
  absl::Status Rename(const std::string& from, const std::string& to) override;
  absl::Status Unlink(const std::string& path) override;
};

// The operations a FaultInjectingFileSystem counts and can fail.
enum class FileOp {
  kShmOpen,
  kShmUnlink,
  kOpen,
  kTruncate,
  kAllocate,
  kStat,
  kMap,
  kRead,
  kWrite,
  kSync,
  kRename,
  kUnlink,
};
inline constexpr size_t kFileOpCount = 12;

// Tests only: forwards every call to `base` (default: the real one) except the faults it was
// told to inject, and counts the calls of each operation. A failed call does not reach `base`
// and reports PosixError with the same context the real one would give.
class FaultInjectingFileSystem : public FileSystem {
 public:
  explicit FaultInjectingFileSystem(FileSystem* base = FileSystem::Default()) : base_(base) {}

  // The `nth` call of `op` from now (1: the next one) fails with `error_number`, once.
  void FailNth(FileOp op, int error_number, int nth = 1);
  // Every call of `op` from now fails with `error_number`, until Heal().
  void FailAlways(FileOp op, int error_number);
  // Reads see every file as ending at `size` bytes: a read across it comes up short, one
  // at or beyond it reads 0 bytes (a truncated file).
  void TruncateReadsAt(uint64_t size);
  // Forgets every fault (the counts stay).
  void Heal();
  // Calls of `op` so far, failed ones included.
  int Calls(FileOp op) const;

  absl::StatusOr<UniqueFd> ShmOpen(const std::string& name, int flags, mode_t mode) override;
  absl::Status ShmUnlink(const std::string& name) override;
  absl::StatusOr<UniqueFd> Open(const std::string& path, int flags, mode_t mode) override;
  absl::Status Truncate(int fd, uint64_t size, absl::string_view name) override;
  absl::Status Allocate(int fd, char* data, uint64_t size, int threads, absl::string_view name,
                        WorkProgress* progress) override;
  absl::Status ReserveSpace(int fd, uint64_t size, absl::string_view name,
                            WorkProgress* progress) override;
  absl::StatusOr<struct stat> Stat(int fd, absl::string_view name) override;
  absl::StatusOr<char*> Map(int fd, uint64_t size, absl::string_view name) override;
  void Unmap(char* data, uint64_t size) override;
  absl::StatusOr<size_t> Read(int fd, uint64_t offset, char* destination, size_t bytes,
                              absl::string_view name) override;
  absl::StatusOr<size_t> CopyRange(int from, int to, uint64_t offset, size_t bytes,
                                   absl::string_view name) override;
  absl::Status Write(int fd, const char* data, size_t bytes, absl::string_view name) override;
  absl::Status WriteAt(int fd, uint64_t offset, const char* data, size_t bytes,
                       absl::string_view name) override;
  absl::Status Sync(int fd, absl::string_view name) override;
  absl::Status Rename(const std::string& from, const std::string& to) override;
  absl::Status Unlink(const std::string& path) override;

 private:
  struct Fault {
    int error_number = 0;
    int countdown = 0;  // fails when it reaches 1; 0: no fault
    bool always = false;
  };
  // Counts the call; the errno to fail it with, or 0 to forward it.
  int Enter(FileOp op);
  // `bytes` from `offset` cut at the read limit (TruncateReadsAt): 0 at or beyond it.
  size_t ClampToReadLimit(uint64_t offset, size_t bytes) const;

  FileSystem* const base_;
  mutable absl::Mutex mu_;
  std::array<int, kFileOpCount> calls_ ABSL_GUARDED_BY(mu_) = {};
  std::array<Fault, kFileOpCount> faults_ ABSL_GUARDED_BY(mu_) = {};
  uint64_t read_limit_ ABSL_GUARDED_BY(mu_) = UINT64_MAX;
};

}  // namespace ddo

#endif  // DDO_DAEMON_COMMON_FILE_SYSTEM_H_
