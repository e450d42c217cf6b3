// File: daemon/store/segment_fill.cc
#include "daemon/store/segment_fill.h"

#include "absl/time/clock.h"
#include "daemon/common/logging.h"
#include "daemon/common/status_macros.h"
#include "daemon/pool/range_pinner.h"
#include "daemon/store/direct_fill.h"
#include "daemon/store/parallel_reader.h"

namespace ddo {

absl::StatusOr<SegmentTarget> SegmentTarget::Of(PoolSegment& segment) {
  if (segment.prefaulted()) return SegmentTarget(segment, UniqueFd());
  DDO_ASSIGN_OR_RETURN(UniqueFd fd, segment.OpenForWriting());
  return SegmentTarget(segment, std::move(fd));
}

void SegmentTarget::Aim(ReadJob& job, uint64_t offset) const {
  job.destination_name = segment_->name();
  if (fd_.valid()) {
    job.destination = nullptr;
    job.destination_fd = fd_.get();
    job.destination_offset = offset;
  } else {
    job.destination = segment_->data() + offset;
    job.destination_fd = -1;
  }
}

absl::StatusOr<FillTimes> FillSegmentFromFiles(
    const SafetensorsSet& set, const std::vector<TensorEntry>& laid_out, PoolSegment& segment,
    int threads, const std::function<void(uint64_t, uint64_t)>& progress,
    const std::function<bool()>& cancelled, FileSystem* fs) {
  DDO_ASSIGN_OR_RETURN(SegmentTarget target, SegmentTarget::Of(segment));
  std::vector<ReadJob> jobs;
  std::vector<ByteRange> extents;
  size_t index = 0;
  for (const SafetensorsFile& file : set.files) {
    for (const SafetensorsTensor& source : file.tensors) {
      const TensorEntry& placed = laid_out.at(index++);
      ReadJob job{file.fd.get(), source.file_offset, nullptr, source.byte_size, file.name};
      target.Aim(job, placed.offset);
      jobs.push_back(std::move(job));
      extents.push_back({placed.offset, source.byte_size});
    }
  }
  std::vector<size_t> part_of;
  std::vector<ByteRange> parts = PinParts(extents, segment.size(), kPinPartBytes, &part_of);
  std::vector<uint64_t> written(parts.size(), 0);
  for (size_t i = 0; i < extents.size(); ++i) written[part_of[i]] += extents[i].bytes;
  RangePinner pinner(segment, std::move(parts), std::move(written));

  FillTimes times;
  const uint64_t total = set.total_bytes;
  const absl::Time reading = absl::Now();
  // A cold load into existing pages reads past the page cache (direct_fill.h), where the file
  // system allows it; the buffered reads below otherwise.
  if (segment.prefaulted() && MostlyUncached(set)) {
    absl::Status direct = FillDirect(
        set, laid_out, segment, threads,
        [&](size_t tensor, uint64_t bytes) { pinner.Written(part_of[tensor], bytes); }, progress,
        cancelled, fs);
    if (direct.ok()) {
      times.direct = true;
    } else if (absl::IsUnimplemented(direct)) {  // no direct I/O here: nothing was written
      Logger("store")->info("reading {} through the page cache: {}", segment.name(),
                            direct.message());
    } else {
      return direct;
    }
  }
  if (!times.direct) {
    DDO_RETURN_IF_ERROR(ReadInParallel(
        jobs, threads, [&](uint64_t done) { progress(done, total); }, cancelled,
        kDefaultReadChunkBytes, fs, [&](size_t job, uint64_t bytes) {
          pinner.Written(part_of[job], bytes);
        }));
  }
  const absl::Time read = absl::Now();
  times.read_s = absl::ToDoubleSeconds(read - reading);
  if (absl::Status pinned = pinner.Finish(); !pinned.ok()) {
    Logger("store")->warn("pinning {} while loading it: {}", segment.name(), pinned.message());
  }
  times.pin_wait_s = absl::ToDoubleSeconds(absl::Now() - read);
  times.pinned = segment.pinned();
  return times;
}

}  // namespace ddo
