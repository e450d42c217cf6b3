#include "daemon/store/safetensors_hash.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/common/posix_error.h"
#include "daemon/store/tensor_table.h"

namespace ddo {
namespace {

constexpr size_t kChunkBytes = size_t{16} << 20;

}  // namespace

absl::StatusOr<std::string> ContentHashOfSafetensors(const SafetensorsSet& set,
                                                     const std::function<bool()>& cancelled) {
  ContentHasher hasher;
  std::vector<char> buffer(kChunkBytes);
  for (const SafetensorsFile& file : set.files) {
    for (const SafetensorsTensor& tensor : file.tensors) {
      for (uint64_t done = 0; done < tensor.byte_size;) {
        if (cancelled()) return absl::CancelledError("cancelled while hashing the files");
        const size_t want =
            static_cast<size_t>(std::min<uint64_t>(kChunkBytes, tensor.byte_size - done));
        const ssize_t got =
            ::pread(file.fd.get(), buffer.data(), want, static_cast<off_t>(tensor.file_offset + done));
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) return PosixError(absl::StrCat("read ", file.name), errno);
        if (got == 0) {
          return absl::DataLossError(absl::StrCat(file.name, " shrank while ddod read it"));
        }
        hasher.Update(buffer.data(), static_cast<size_t>(got));
        done += static_cast<uint64_t>(got);
      }
    }
  }
  return hasher.Digest();
}

}  // namespace ddo
