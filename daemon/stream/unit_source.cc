// File: daemon/stream/unit_source.cc
#include "daemon/stream/unit_source.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "daemon/common/status_macros.h"
#include "daemon/store/direct_reader.h"

namespace ddo {

// One unit's reads: how many jobs are left, the first error, and the bytes they read.
struct UnitSource::Read {
  std::atomic<int> jobs_left{0};
  uint64_t file_bytes = 0;  // set before the jobs start
  absl::Mutex mu;
  absl::Status error ABSL_GUARDED_BY(mu);
  bool done() const { return jobs_left.load(std::memory_order_acquire) == 0; }
};

namespace {

// One job's part: a range of a backing file, read to `destination`.
struct Piece {
  FileRange range;
  char* destination;
};

// The pieces of a unit's file tensors, in jobs of about kFileReadJobBytes: a large tensor is
// split, small ones share a job.
std::vector<std::vector<Piece>> PlanJobs(const ComponentBytes& host, const StreamUnit& unit,
                                         char* image) {
  std::vector<std::vector<Piece>> jobs(1);
  uint64_t in_job = 0;
  for (const PlannedTensor& placed : unit.tensors) {
    if (!host.InFile(placed.table_index)) continue;
    const FileRange& whole = host.files()->ranges()[placed.table_index];
    for (uint64_t done = 0; done < whole.bytes;) {
      if (in_job >= kFileReadJobBytes) {
        jobs.emplace_back();
        in_job = 0;
      }
      const uint64_t bytes = std::min(whole.bytes - done, kFileReadJobBytes - in_job);
      jobs.back().push_back({FileRange{whole.file, whole.offset + done, bytes},
                             image + placed.offset + done});
      in_job += bytes;
      done += bytes;
    }
  }
  if (jobs.back().empty()) jobs.pop_back();
  return jobs;
}

}  // namespace

absl::StatusOr<std::unique_ptr<StagingBuffers>> StagingFor(const ComponentBytes& host,
                                                           const SessionPlan& plan,
                                                           uint32_t buffers, bool pin,
                                                           HostPool* ram) {
  if (host.files() == nullptr || plan.units.empty() || plan.slot_bytes == 0) {
    return std::unique_ptr<StagingBuffers>();
  }
  return StagingBuffers::Create(buffers, plan.slot_bytes, pin, ram);
}

UnitSource::UnitSource(ComponentBytes host, FileReading reading)
    : host_(std::move(host)),
      staging_(std::move(reading.staging)),
      readers_(reading.readers),
      wake_(std::move(reading.wake)) {}

bool UnitSource::InFiles(const StreamUnit& unit) const {
  if (!reads_files()) return false;
  for (const PlannedTensor& placed : unit.tensors) {
    if (host_.InFile(placed.table_index)) return true;
  }
  return false;
}

const UnitSource::Pending* UnitSource::Find(uint64_t key) const {
  for (const Pending& pending : pending_) {
    if (pending.key == key) return &pending;
  }
  return nullptr;
}

std::optional<UnitSource::Pending> UnitSource::StartRead(
    uint64_t key, const StreamUnit& unit, const std::vector<TensorEntry>& tensors) {
  const std::optional<uint32_t> buffer = staging_->Acquire();
  if (!buffer) return std::nullopt;
  char* image = staging_->data(*buffer);
  auto read = std::make_shared<Read>();
  for (const PlannedTensor& placed : unit.tensors) {
    const TensorEntry& tensor = tensors[placed.table_index];
    if (host_.InFile(placed.table_index)) {
      read->file_bytes += tensor.byte_size;
    } else if (tensor.byte_size > 0) {
      std::memcpy(image + placed.offset, host_.DataOf(tensor), tensor.byte_size);
    }
  }
  std::vector<std::vector<Piece>> jobs = PlanJobs(host_, unit, image);
  read->jobs_left.store(static_cast<int>(jobs.size()), std::memory_order_release);
  for (std::vector<Piece>& pieces : jobs) {
    // The job keeps what it writes into and reads from alive, whatever happens to the session.
    auto job = [read, host = host_, staging = staging_, wake = wake_,
                pieces = std::move(pieces)] {
      absl::Status status;
      for (const Piece& piece : pieces) {
        status = ReadRange(host.files()->FileOf(piece.range), piece.range, piece.destination);
        if (!status.ok()) break;
      }
      if (!status.ok()) {
        absl::MutexLock lock(&read->mu);
        if (read->error.ok()) read->error = status;
      }
      if (read->jobs_left.fetch_sub(1, std::memory_order_acq_rel) == 1 && wake) wake();
    };
    if (readers_ == nullptr || !readers_->Submit(job)) job();
  }
  return Pending{key, *buffer, std::move(read)};
}

absl::StatusOr<std::optional<UnitSource::Staged>> UnitSource::Stage(
    uint64_t key, const StreamUnit& unit, const std::vector<TensorEntry>& tensors) {
  if (!InFiles(unit)) return std::optional<Staged>(Staged{});
  if (staging_ == nullptr || unit.span_bytes > staging_->buffer_bytes()) {
    return absl::InternalError(absl::StrCat("a unit of ", unit.span_bytes,
                                            " bytes has no staging buffer to be read into"));
  }
  ReapDropped();
  auto it = std::find_if(pending_.begin(), pending_.end(),
                         [key](const Pending& pending) { return pending.key == key; });
  if (it == pending_.end()) {
    std::optional<Pending> started = StartRead(key, unit, tensors);
    if (!started) return std::optional<Staged>();
    pending_.push_back(*std::move(started));
    it = pending_.end() - 1;
  }
  if (!it->read->done()) return std::optional<Staged>();
  const Pending finished = *it;
  pending_.erase(it);
  absl::Status error;
  {
    absl::MutexLock lock(&finished.read->mu);
    error = finished.read->error;
  }
  if (!error.ok()) {
    staging_->Release(finished.buffer);
    return error;
  }
  file_bytes_read_ += finished.read->file_bytes;
  return std::optional<Staged>(Staged{finished.buffer, staging_->data(finished.buffer)});
}

bool UnitSource::Prefetch(uint64_t key, const StreamUnit& unit,
                          const std::vector<TensorEntry>& tensors) {
  if (!InFiles(unit) || Find(key) != nullptr) return true;
  if (staging_ == nullptr || unit.span_bytes > staging_->buffer_bytes()) return false;
  ReapDropped();
  // The last free buffer is never read ahead into: an out-of-schedule request, which the
  // runner waits on while the ring is full, must always find one.
  if (staging_->free_count() < 2) return false;
  std::optional<Pending> started = StartRead(key, unit, tensors);
  if (!started) return false;
  pending_.push_back(*std::move(started));
  return true;
}

bool UnitSource::CanStage(uint64_t key, const StreamUnit& unit) const {
  if (!InFiles(unit)) return true;
  if (const Pending* pending = Find(key)) return pending->read->done();
  if (staging_ == nullptr) return true;  // Stage reports the error
  for (const Pending& dropped : dropped_) {
    if (dropped.read->done()) return true;  // its buffer comes back at once
  }
  return staging_->free_count() > 0;
}

void UnitSource::DropBelow(uint64_t key) {
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (it->key < key) {
      dropped_.push_back(*it);
      it = pending_.erase(it);
    } else {
      ++it;
    }
  }
}

void UnitSource::ReapDropped() {
  for (auto it = dropped_.begin(); it != dropped_.end();) {
    if (it->read->done()) {
      staging_->Release(it->buffer);
      it = dropped_.erase(it);
    } else {
      ++it;
    }
  }
}

void UnitSource::Release(const Staged& staged) {
  if (staged.buffer && staging_ != nullptr) staging_->Release(*staged.buffer);
}

}  // namespace ddo
