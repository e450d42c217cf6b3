// File: daemon/stream/slab_file_fill.cc
#include "daemon/stream/slab_file_fill.h"

#include <algorithm>
#include <deque>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace ddo {
namespace {

// The bounce buffers between the reading threads and the copying one.
class ChunkExchange {
 public:
  ChunkExchange(size_t chunks, size_t buffers, uint64_t buffer_bytes)
      : chunks_(chunks), buffers_(buffers, std::vector<char>(buffer_bytes)) {
    for (size_t i = 0; i < buffers; ++i) free_.push_back(i);
  }

  // A reader's next chunk and a free buffer for it; false when none is left or the fill
  // stopped.
  bool NextRead(size_t* chunk, size_t* buffer) {
    absl::MutexLock lock(&mu_);
    while (!stopped_ && next_ < chunks_ && free_.empty()) changed_.Wait(&mu_);
    if (stopped_ || next_ >= chunks_) return false;
    *chunk = next_++;
    *buffer = free_.back();
    free_.pop_back();
    return true;
  }
  void Filled(size_t chunk, size_t buffer) {
    absl::MutexLock lock(&mu_);
    filled_.emplace_back(chunk, buffer);
    changed_.SignalAll();
  }
  // The next filled chunk for the copier; false when the fill stopped and none is left.
  bool NextCopy(size_t* chunk, size_t* buffer) {
    absl::MutexLock lock(&mu_);
    while (!stopped_ && filled_.empty()) changed_.Wait(&mu_);
    if (filled_.empty()) return false;
    std::tie(*chunk, *buffer) = filled_.front();
    filled_.pop_front();
    return true;
  }
  void Copied(size_t buffer) {
    absl::MutexLock lock(&mu_);
    free_.push_back(buffer);
    changed_.SignalAll();
  }
  // Stops the fill with `status` (the first one stays).
  void Fail(absl::Status status) {
    absl::MutexLock lock(&mu_);
    if (failure_.ok()) failure_ = std::move(status);
    stopped_ = true;
    changed_.SignalAll();
  }
  absl::Status failure() {
    absl::MutexLock lock(&mu_);
    return failure_;
  }
  char* data(size_t buffer) { return buffers_[buffer].data(); }

 private:
  const size_t chunks_;
  std::vector<std::vector<char>> buffers_;  // sized once; each used by one thread at a time
  absl::Mutex mu_;
  absl::CondVar changed_;
  size_t next_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<size_t> free_ ABSL_GUARDED_BY(mu_);
  std::deque<std::pair<size_t, size_t>> filled_ ABSL_GUARDED_BY(mu_);  // (chunk, buffer)
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status failure_ ABSL_GUARDED_BY(mu_);
};

absl::Status Named(const SlabFileChunk& chunk, const absl::Status& status) {
  return absl::Status(status.code(), absl::StrCat("filling the slab with '", *chunk.tensor_name,
                                                  "': ", status.message()));
}

}  // namespace

void AppendSlabFileChunks(uint64_t slab_offset, const FileRange& range,
                          const std::string& tensor_name, std::vector<SlabFileChunk>& chunks) {
  for (uint64_t done = 0; done < range.bytes; done += kSlabFileChunkBytes) {
    const uint64_t bytes = std::min(kSlabFileChunkBytes, range.bytes - done);
    chunks.push_back({slab_offset + done, FileRange{range.file, range.offset + done, bytes},
                      &tensor_name});
  }
}

absl::Status FillSlabFromFiles(ResidentSlab& slab, const std::vector<SlabFileChunk>& chunks,
                               const ComponentBytes& host, int threads) {
  if (chunks.empty()) return absl::OkStatus();
  const size_t readers = std::clamp<size_t>(threads, 1, chunks.size());
  uint64_t largest = 0;
  for (const SlabFileChunk& chunk : chunks) largest = std::max(largest, chunk.range.bytes);
  // Two buffers more than readers: the copier works on one while every reader reads (and one
  // filled waits), never more than one chunk's bytes each.
  ChunkExchange exchange(chunks.size(), readers + 2, largest);
  std::vector<std::thread> reading;
  for (size_t r = 0; r < readers; ++r) {
    reading.emplace_back([&] {
      size_t chunk = 0, buffer = 0;
      while (exchange.NextRead(&chunk, &buffer)) {
        absl::Status read = host.ReadRanges({chunks[chunk].range}, exchange.data(buffer));
        if (!read.ok()) return exchange.Fail(Named(chunks[chunk], read));
        exchange.Filled(chunk, buffer);
      }
    });
  }
  size_t copied = 0, chunk = 0, buffer = 0;
  while (copied < chunks.size() && exchange.NextCopy(&chunk, &buffer)) {
    absl::Status copy =
        slab.Copy(chunks[chunk].slab_offset, exchange.data(buffer), chunks[chunk].range.bytes);
    if (!copy.ok()) {
      exchange.Fail(Named(chunks[chunk], copy));
      break;
    }
    exchange.Copied(buffer);
    ++copied;
  }
  for (std::thread& thread : reading) thread.join();
  return exchange.failure();
}

}  // namespace ddo
