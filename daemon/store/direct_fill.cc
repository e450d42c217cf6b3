// File: daemon/store/direct_fill.cc
#include "daemon/store/direct_fill.h"

#include <fcntl.h>
#include <sys/uio.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "daemon/common/status_macros.h"

namespace ddo {
namespace {

// O_DIRECT wants offsets, lengths and buffers aligned to the device's logical block (512 B or
// 4 KiB): 4 KiB serves both.
constexpr uint64_t kAlign = 4096;
constexpr uint64_t kChunkBytes = uint64_t{16} << 20;
constexpr int kProbesPerFile = 8;

uint64_t AlignDown(uint64_t value) { return value & ~(kAlign - 1); }
uint64_t AlignUp(uint64_t value) { return AlignDown(value + kAlign - 1); }

// One aligned piece of a file and the tensors (flat indexes) it overlaps.
struct Chunk {
  size_t file = 0;
  uint64_t offset = 0;
  uint64_t bytes = 0;
  size_t first_tensor = 0;
  size_t end_tensor = 0;
};

std::vector<Chunk> ChunksOf(const SafetensorsSet& set) {
  std::vector<Chunk> chunks;
  size_t base = 0;  // flat index of the file's first tensor
  for (size_t f = 0; f < set.files.size(); ++f) {
    const std::vector<SafetensorsTensor>& tensors = set.files[f].tensors;
    uint64_t end = 0;
    for (const SafetensorsTensor& tensor : tensors) {
      end = std::max(end, tensor.file_offset + tensor.byte_size);
    }
    size_t first = 0;
    for (uint64_t offset = tensors.empty() ? end : AlignDown(tensors.front().file_offset);
         offset < end; offset += kChunkBytes) {
      const uint64_t stop = std::min(offset + kChunkBytes, AlignUp(end));
      while (first < tensors.size() &&
             tensors[first].file_offset + tensors[first].byte_size <= offset) {
        ++first;
      }
      size_t last = first;
      while (last < tensors.size() && tensors[last].file_offset < stop) ++last;
      chunks.push_back({f, offset, stop - offset, base + first, base + last});
    }
    base += tensors.size();
  }
  return chunks;
}

// The files opened again for direct reads; Unimplemented when one cannot be.
absl::StatusOr<std::vector<UniqueFd>> OpenDirect(const SafetensorsSet& set, FileSystem& fs) {
  std::vector<UniqueFd> direct;
  for (const SafetensorsFile& file : set.files) {
    // O_NONBLOCK: a new open of a caller's file would break a lease the caller holds on it,
    // and wait for the caller to let go (lease-break-time, 45 s by default), holding the call
    // and ddod's shutdown; non-blocking, it fails at once (EWOULDBLOCK) and the buffered reads,
    // which break no lease, take over. It changes nothing else for a regular file.
    absl::StatusOr<UniqueFd> opened =
        fs.Open(absl::StrCat("/proc/self/fd/", file.fd.get()),
                O_RDONLY | O_DIRECT | O_NONBLOCK | O_CLOEXEC, 0);
    if (!opened.ok()) {
      return absl::UnimplementedError(absl::StrCat("no direct reads of ", file.name, ": ",
                                                   opened.status().message()));
    }
    direct.push_back(*std::move(opened));
  }
  return direct;
}

struct FreeDeleter {
  void operator()(char* buffer) const { std::free(buffer); }
};

}  // namespace

bool MostlyUncached(const SafetensorsSet& set) {
  alignas(kAlign) static thread_local char page[kAlign];
  int probes = 0;
  int missing = 0;
  for (const SafetensorsFile& file : set.files) {
    if (file.file_size <= file.data_start) continue;
    const uint64_t span = file.file_size - file.data_start;
    for (int i = 0; i < kProbesPerFile; ++i) {
      const uint64_t offset = AlignDown(file.data_start + span / kProbesPerFile * i);
      iovec vector{page, sizeof(page)};
      const ssize_t got = ::preadv2(file.fd.get(), &vector, 1, static_cast<off_t>(offset),
                                    RWF_NOWAIT);
      if (got < 0 && errno != EAGAIN) return false;  // the probe cannot tell
      ++probes;
      if (got < 0) ++missing;
    }
  }
  return probes > 0 && missing * 2 > probes;
}

absl::Status FillDirect(const SafetensorsSet& set, const std::vector<TensorEntry>& laid_out,
                        PoolSegment& segment, int threads,
                        const std::function<void(size_t tensor, uint64_t bytes)>& written,
                        const std::function<void(uint64_t, uint64_t)>& progress,
                        const std::function<bool()>& cancelled, FileSystem* fs) {
  if (fs == nullptr) fs = FileSystem::Default();
  DDO_ASSIGN_OR_RETURN(std::vector<UniqueFd> direct, OpenDirect(set, *fs));
  std::vector<const SafetensorsTensor*> flat;
  for (const SafetensorsFile& file : set.files) {
    for (const SafetensorsTensor& tensor : file.tensors) flat.push_back(&tensor);
  }
  if (flat.size() != laid_out.size()) {
    return absl::InternalError("the layout does not match the files' tensors");
  }
  const std::vector<Chunk> chunks = ChunksOf(set);
  std::atomic<size_t> next{0};
  std::atomic<uint64_t> done{0};
  absl::Mutex mu;
  absl::Status error;
  absl::Time reported = absl::InfinitePast();
  auto fail = [&](absl::Status status) {
    absl::MutexLock lock(&mu);
    if (error.ok()) error = std::move(status);
    next.store(chunks.size());
  };
  auto work = [&] {
    std::unique_ptr<char, FreeDeleter> buffer(
        static_cast<char*>(std::aligned_alloc(kAlign, kChunkBytes)));
    if (buffer == nullptr) return fail(absl::ResourceExhaustedError("no bounce buffer"));
    for (size_t i = next++; i < chunks.size(); i = next++) {
      if (cancelled && cancelled()) return fail(absl::CancelledError("the load was cancelled"));
      const Chunk& chunk = chunks[i];
      const SafetensorsFile& file = set.files[chunk.file];
      uint64_t got = 0;
      while (got < chunk.bytes) {
        absl::StatusOr<size_t> read = fs->Read(direct[chunk.file].get(), chunk.offset + got,
                                               buffer.get() + got, chunk.bytes - got, file.name);
        if (!read.ok()) return fail(read.status());
        if (*read == 0) break;  // the end of the file
        got += *read;
      }
      uint64_t copied = 0;
      for (size_t t = chunk.first_tensor; t < chunk.end_tensor; ++t) {
        const SafetensorsTensor& tensor = *flat[t];
        const uint64_t from = std::max(tensor.file_offset, chunk.offset);
        const uint64_t to = std::min(tensor.file_offset + tensor.byte_size, chunk.offset + chunk.bytes);
        if (to > chunk.offset + got) {
          return fail(absl::DataLossError(absl::StrCat(
              file.name, " shrank while reading: it ends at ", chunk.offset + got, ", inside '",
              tensor.name, "'")));
        }
        std::memcpy(segment.data() + laid_out[t].offset + (from - tensor.file_offset),
                    buffer.get() + (from - chunk.offset), to - from);
        if (written) written(t, to - from);
        copied += to - from;
      }
      done += copied;
      if (progress) {
        absl::MutexLock lock(&mu);  // one call at a time, and the total only grows
        if (absl::Now() - reported >= absl::Milliseconds(50)) {
          reported = absl::Now();
          progress(done.load(), set.total_bytes);
        }
      }
    }
  };
  std::vector<std::thread> workers;
  const int count = std::max(1, std::min<int>(threads, static_cast<int>(chunks.size())));
  for (int t = 1; t < count; ++t) workers.emplace_back(work);
  work();
  for (std::thread& worker : workers) worker.join();
  DDO_RETURN_IF_ERROR(error);
  if (progress) progress(done.load(), set.total_bytes);
  return absl::OkStatus();
}

}  // namespace ddo
