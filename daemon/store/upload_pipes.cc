// File: daemon/store/upload_pipes.cc
#include "daemon/store/upload_pipes.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <numeric>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "daemon/common/format_bytes.h"
#include "daemon/common/logging.h"
#include "ddo/wire/posix_error.h"

namespace ddo {
namespace {

// How long a reader waits for its pipe before it looks at cancellation and the idle limit.
constexpr int kPollMs = 100;

// What the readers of one Fill share.
struct FillState {
  std::atomic<int64_t> last_byte_ns{0};  // when any stream last brought a byte (unix ns)
  std::atomic<bool> stop{false};         // a reader failed: the others stop too
};

int64_t NowNs() { return absl::ToUnixNanos(absl::Now()); }

uint64_t TotalBytes(const std::vector<ByteRange>& ranges) {
  uint64_t total = 0;
  for (const ByteRange& range : ranges) total += range.bytes;
  return total;
}

// One reader: the stream's ranges, in order, from its non-blocking read end.
absl::Status ReadStream(int fd, int stream, char* base, const std::vector<ByteRange>& ranges,
                        WorkProgress* progress, const std::function<bool()>& cancelled,
                        absl::Duration idle_limit, FillState& state) {
  const uint64_t expected = TotalBytes(ranges);
  uint64_t received = 0;
  for (const ByteRange& range : ranges) {
    uint64_t done = 0;
    while (done < range.bytes) {
      if (state.stop.load(std::memory_order_relaxed)) return absl::OkStatus();
      const ssize_t got = ::read(fd, base + range.offset + done, range.bytes - done);
      if (got > 0) {
        done += static_cast<uint64_t>(got);
        received += static_cast<uint64_t>(got);
        if (progress != nullptr) progress->Add(static_cast<uint64_t>(got));
        state.last_byte_ns.store(NowNs(), std::memory_order_relaxed);
        continue;
      }
      if (got == 0) {
        return absl::DataLossError(absl::StrCat(
            "upload stream ", stream, " ended after ", FormatBytes(received), " of ",
            FormatBytes(expected), ": the client closed it early or died"));
      }
      if (errno == EINTR) continue;
      if (errno != EAGAIN) return PosixError(absl::StrCat("reading upload stream ", stream), errno);
      pollfd wait{fd, POLLIN, 0};
      (void)::poll(&wait, 1, kPollMs);
      if (cancelled()) return absl::CancelledError("the upload was cancelled while it streamed");
      const int64_t silent_ns = NowNs() - state.last_byte_ns.load(std::memory_order_relaxed);
      if (absl::Nanoseconds(silent_ns) > idle_limit) {
        return absl::DeadlineExceededError(absl::StrCat(
            "the client sent no byte of its upload for ", absl::FormatDuration(idle_limit),
            " (stream ", stream, " had ", FormatBytes(received), " of ",
            FormatBytes(expected), "); the upload was given up"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

std::vector<int> AssignStreams(const std::vector<TensorEntry>& tensors, int streams) {
  std::vector<int> assignment(tensors.size(), -1);
  std::vector<size_t> order;
  uint64_t total = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (tensors[i].segment != 0 || tensors[i].byte_size == 0) continue;
    order.push_back(i);
    total += tensors[i].byte_size;
  }
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return tensors[a].offset < tensors[b].offset; });
  const uint64_t count = static_cast<uint64_t>(std::max(streams, 1));
  uint64_t before = 0;  // bytes of the tensors ahead of this one
  for (size_t i : order) {
    // A tensor goes to the stream its first byte's share of the total falls in.
    assignment[i] = static_cast<int>(std::min<uint64_t>(before * count / total, count - 1));
    before += tensors[i].byte_size;
  }
  return assignment;
}

std::vector<std::vector<ByteRange>> StreamRanges(const std::vector<TensorEntry>& tensors,
                                                 const std::vector<int>& assignment,
                                                 int streams) {
  std::vector<std::vector<ByteRange>> ranges(static_cast<size_t>(std::max(streams, 0)));
  std::vector<size_t> order(tensors.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return tensors[a].offset < tensors[b].offset; });
  for (size_t i : order) {
    const int stream = assignment[i];
    if (stream < 0 || stream >= streams) continue;
    ranges[static_cast<size_t>(stream)].push_back({tensors[i].offset, tensors[i].byte_size});
  }
  return ranges;
}

absl::StatusOr<std::unique_ptr<UploadPipes>> UploadPipes::Create(int count) {
  if (count < 1 || count > kMaxUploadStreams) {
    return absl::InvalidArgumentError(
        absl::StrCat("an upload has 1 to ", kMaxUploadStreams, " streams, not ", count));
  }
  std::unique_ptr<UploadPipes> pipes(new UploadPipes());
  for (int i = 0; i < count; ++i) {
    int ends[2];
    // The read end non-blocking from the start: its open file description is ddod's alone.
    if (::pipe2(ends, O_CLOEXEC) != 0) return PosixError("creating an upload pipe", errno);
    UniqueFd read_end(ends[0]);
    UniqueFd write_end(ends[1]);
    if (::fcntl(read_end.get(), F_SETFL, O_NONBLOCK) != 0) {
      return PosixError("making an upload pipe non-blocking", errno);
    }
    if (::fcntl(read_end.get(), F_SETPIPE_SZ, static_cast<int>(kUploadPipeBytes)) < 0) {
      // Past the user's pipe quota (fs.pipe-user-pages-soft) a pipe keeps its default size:
      // slower (more calls per byte), not wrong.
      Logger("store")->debug("an upload pipe keeps its default size: {}", std::strerror(errno));
    }
    pipes->read_ends_.push_back(std::move(read_end));
    pipes->write_ends_.push_back(std::move(write_end));
  }
  return pipes;
}

std::vector<UniqueFd> UploadPipes::TakeWriteEnds() { return std::exchange(write_ends_, {}); }

absl::Status UploadPipes::Fill(PoolSegment& segment,
                               const std::vector<std::vector<ByteRange>>& ranges,
                               WorkProgress* progress, const std::function<bool()>& cancelled,
                               absl::Duration idle_limit) {
  if (ranges.size() != read_ends_.size()) {
    return absl::InternalError(absl::StrCat(ranges.size(), " streams of ranges for ",
                                            read_ends_.size(), " pipes"));
  }
  for (const std::vector<ByteRange>& stream : ranges) {
    for (const ByteRange& range : stream) {
      if (range.offset > segment.size() || range.bytes > segment.size() - range.offset) {
        return absl::InternalError("an upload stream's range lies outside its segment");
      }
    }
  }
  write_ends_.clear();  // never wait on a write end of ddod's own
  FillState state;
  state.last_byte_ns.store(NowNs());
  std::vector<absl::Status> results(read_ends_.size());
  {
    std::vector<std::thread> readers;
    for (size_t i = 0; i < read_ends_.size(); ++i) {
      readers.emplace_back([&, i] {
        results[i] = ReadStream(read_ends_[i].get(), static_cast<int>(i), segment.data(),
                                ranges[i], progress, cancelled, idle_limit, state);
        if (!results[i].ok()) state.stop.store(true);
      });
    }
    for (std::thread& reader : readers) reader.join();
  }
  for (const absl::Status& result : results) {
    if (!result.ok()) return result;
  }
  return absl::OkStatus();
}

}  // namespace ddo
