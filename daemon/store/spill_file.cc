// File: daemon/store/spill_file.cc
#include "daemon/store/spill_file.h"

#include <fcntl.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "daemon/common/random_id.h"
#include "daemon/common/status_macros.h"
#include "daemon/store/parallel_reader.h"

namespace ddo {
namespace {

constexpr uint64_t kSpillAlignment = 4096;

// A new file in `directory` that no name reaches: O_TMPFILE, else a fresh name (O_EXCL,
// never following a link) unlinked at once.
absl::StatusOr<UniqueFd> OpenUnnamed(const std::string& directory, FileSystem& fs) {
  absl::StatusOr<UniqueFd> unnamed =
      fs.Open(directory, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (unnamed.ok()) return unnamed;
  const std::string path = absl::StrCat(directory, "/spill-", RandomId());
  DDO_ASSIGN_OR_RETURN(UniqueFd named,
                       fs.Open(path, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC | O_NOFOLLOW, 0600));
  DDO_RETURN_IF_ERROR(fs.Unlink(path));
  return named;
}

}  // namespace

std::vector<FileRange> SpillLayout(const std::vector<TensorEntry>& tensors, uint64_t* size) {
  std::vector<FileRange> ranges;
  ranges.reserve(tensors.size());
  uint64_t offset = 0;
  for (const TensorEntry& tensor : tensors) {
    ranges.push_back({0, offset, tensor.byte_size});
    offset = (offset + tensor.byte_size + kSpillAlignment - 1) / kSpillAlignment * kSpillAlignment;
  }
  *size = offset;
  return ranges;
}

absl::StatusOr<BackingFiles> SpillToFile(const std::string& directory,
                                         const std::vector<TensorEntry>& tensors,
                                         const std::vector<std::shared_ptr<PoolSegment>>& segments,
                                         int threads, const std::function<bool()>& cancelled,
                                         FileSystem* fs) {
  FileSystem& files = fs != nullptr ? *fs : *FileSystem::Default();
  uint64_t size = 0;
  std::vector<FileRange> ranges = SpillLayout(tensors, &size);
  DDO_ASSIGN_OR_RETURN(UniqueFd file, OpenUnnamed(directory, files));
  const std::string name = "spill file";
  if (size > 0) DDO_RETURN_IF_ERROR(files.ReserveSpace(file.get(), size, name, nullptr));
  std::vector<UniqueFd> sources;
  for (const auto& segment : segments) {
    if (segment == nullptr) return absl::FailedPreconditionError("a segment is missing");
    DDO_ASSIGN_OR_RETURN(UniqueFd source, segment->OpenForWriting());
    sources.push_back(std::move(source));
  }
  std::vector<ReadJob> jobs;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorEntry& tensor = tensors[i];
    if (tensor.byte_size == 0) continue;
    if (tensor.segment >= sources.size()) {
      return absl::FailedPreconditionError(
          absl::StrCat("tensor ", i, " names segment ", tensor.segment, " of ", sources.size()));
    }
    jobs.push_back({sources[tensor.segment].get(), tensor.offset, nullptr, tensor.byte_size,
                    segments[tensor.segment]->name(), file.get(), ranges[i].offset, name});
  }
  DDO_RETURN_IF_ERROR(
      ReadInParallel(jobs, threads, {}, cancelled, kDefaultReadChunkBytes, &files));
  // On disk, then out of the page cache: the spill exists to give RAM back.
  DDO_RETURN_IF_ERROR(files.Sync(file.get(), name));
  (void)posix_fadvise(file.get(), 0, 0, POSIX_FADV_DONTNEED);
  // Kept and handed out read-only (a client is only ever given a read-only descriptor): a
  // new open file description of the same file, through /proc since it has no name.
  DDO_ASSIGN_OR_RETURN(UniqueFd read_only,
                       files.Open(absl::StrCat("/proc/self/fd/", file.get()),
                                  O_RDONLY | O_CLOEXEC, 0));
  return BackingFiles::OfOwnFile(std::move(read_only), name, std::move(ranges), &files);
}

}  // namespace ddo
