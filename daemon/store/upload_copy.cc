// File: daemon/store/upload_copy.cc
#include "daemon/store/upload_copy.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <thread>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "daemon/common/logging.h"
#include "daemon/common/status_macros.h"
#include "daemon/pool/range_pinner.h"
#include "ddo/wire/posix_error.h"

namespace ddo {

absl::StatusOr<std::shared_ptr<PoolSegment>> CopyUploadSegment(
    HostPool& pool, FileSystem& fs, const PoolSegment& upload,
    const std::vector<ByteRange>& extents, int threads, WorkProgress* progress) {
  DDO_ASSIGN_OR_RETURN(std::shared_ptr<PoolSegment> copy, pool.AllocateReplacement(upload));
  auto discard = absl::MakeCleanup([&] { copy->MarkDiscarded(); });
  std::vector<ByteRange> parts = PinParts(extents, copy->size(), kPinPartBytes);
  std::vector<uint64_t> part_bytes;
  for (const ByteRange& part : parts) part_bytes.push_back(part.bytes);
  RangePinner pinner(*copy, std::move(parts), std::move(part_bytes));
  DDO_ASSIGN_OR_RETURN(UniqueFd to, fs.ShmOpen(copy->name(), O_RDWR | O_CLOEXEC, 0));
  DDO_ASSIGN_OR_RETURN(UniqueFd from, fs.ShmOpen(upload.name(), O_RDWR | O_CLOEXEC, 0));
  // Copied file to file in the kernel (FileSystem::CopyRange), not through ddod's mappings: a
  // client that truncates its upload makes the copy short (an error here), not a SIGBUS in
  // ddod, a full /dev/shm is ENOSPC, and no page of either mapping faults one at a time (on
  // the 2-core test machine, pread into the mapped copy took 4.9 s a GiB, copy_file_range
  // 0.6 s). The copy's pages are then mapped in bulk (MADV_POPULATE_READ), so that the hash
  // and the pinning that follow do not fault them in one by one either.
  constexpr uint64_t kChunk = uint64_t{32} << 20;
  const uint64_t size = upload.size();
  const uint64_t chunks = (size + kChunk - 1) / kChunk;
  std::atomic<uint64_t> next{0};
  absl::Mutex error_mu;
  absl::Status error;
  auto fail = [&](absl::Status status) {
    absl::MutexLock lock(&error_mu);
    if (error.ok()) error = std::move(status);
    next.store(chunks);
  };
  auto work = [&] {
    for (uint64_t i = next++; i < chunks; i = next++) {
      const uint64_t offset = i * kChunk;
      const uint64_t length = std::min(kChunk, size - offset);
      for (uint64_t done = 0; done < length;) {
        absl::StatusOr<size_t> copied =
            fs.CopyRange(from.get(), to.get(), offset + done, length - done, upload.name());
        if (!copied.ok() || *copied == 0) {
          fail(copied.ok() ? absl::FailedPreconditionError(
                                 "the upload segment was truncated by its client before commit")
                           : copied.status());
          return;
        }
        done += *copied;
      }
#ifdef MADV_POPULATE_READ
      (void)::madvise(copy->data() + offset, length, MADV_POPULATE_READ);  // a hint: may fail
#endif
      // The upload's pages go as soon as they are copied: the commit holds about a chunk per
      // thread more than the component, not twice it.
      (void)::fallocate(from.get(), FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                        static_cast<off_t>(offset), static_cast<off_t>(length));
      pinner.WrittenRange(offset, length);
      if (progress != nullptr) progress->Add(length);
    }
  };
  {
    std::vector<std::thread> workers;
    const int count = std::max(1, std::min<int>(threads, static_cast<int>(chunks)));
    for (int t = 1; t < count; ++t) workers.emplace_back(work);
    work();
    for (std::thread& worker : workers) worker.join();
  }
  // The client's writable mapping of the upload ends here: its pages are gone and every
  // later touch of it faults (SIGBUS) instead of writing bytes ddod serves.
  if (::ftruncate(from.get(), 0) != 0 && error.ok()) {
    error = PosixError(absl::StrCat("truncating ", upload.name()), errno);
  }
  (void)fs.ShmUnlink(upload.name());
  DDO_RETURN_IF_ERROR(error);
  if (absl::Status pinned = pinner.Finish(); !pinned.ok()) {
    Logger("store")->warn("pinning {} while copying it: {}", copy->name(), pinned.message());
  }
  std::move(discard).Cancel();
  return copy;
}

}  // namespace ddo
