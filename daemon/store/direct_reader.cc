// File: daemon/store/direct_reader.cc
//
// ReadRange: a pread loop in pieces of at most 16 MiB (the parallel reader's chunk), so one
// call never asks the kernel for more than a bounded span at once.
//
// Thread-safety: see the header.
#include "daemon/store/direct_reader.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/common/status_macros.h"
#include "daemon/layout/tensor_table.h"

namespace ddo {
namespace {

constexpr uint64_t kMaxReadBytes = uint64_t{16} << 20;

}  // namespace

absl::Status ReadRange(const BackingFile& file, const FileRange& range, char* dst,
                       FileSystem* fs) {
  if (dst == nullptr && range.bytes > 0) {
    return absl::InvalidArgumentError(absl::StrCat("no buffer to read ", file.name, " into"));
  }
  if (file.get() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(file.name, " has no open descriptor"));
  }
  FileSystem& reader = fs != nullptr ? *fs : *FileSystem::Default();
  uint64_t done = 0;
  while (done < range.bytes) {
    const auto want = static_cast<size_t>(std::min(range.bytes - done, kMaxReadBytes));
    DDO_ASSIGN_OR_RETURN(size_t got,
                         reader.Read(file.get(), range.offset + done, dst + done, want, file.name));
    if (got == 0) {
      return absl::DataLossError(absl::StrCat(
          file.name, " ended at offset ", range.offset + done, ", inside the range [",
          range.offset, ", ", range.end(), ") being read: the file shrank after it was loaded"));
    }
    done += got;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ContentHashOfFiles(const BackingFiles& files, uint64_t buffer_bytes,
                                               const std::function<bool()>& cancelled,
                                               FileSystem* fs) {
  const uint64_t size =
      std::max<uint64_t>(4096, std::min(buffer_bytes, std::max<uint64_t>(files.tensor_bytes(), 1)));
  std::vector<char> buffer(size);
  ContentHasher hasher;
  for (const FileRange& range : files.ranges()) {
    for (uint64_t done = 0; done < range.bytes; done += size) {
      if (cancelled && cancelled()) return absl::CancelledError("the hash was cancelled");
      const FileRange piece{range.file, range.offset + done, std::min(size, range.bytes - done)};
      DDO_RETURN_IF_ERROR(ReadRange(files.FileOf(piece), piece, buffer.data(), fs));
      hasher.Update(buffer.data(), piece.bytes);
    }
  }
  return hasher.Digest();
}

}  // namespace ddo
