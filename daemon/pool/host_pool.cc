#include "daemon/pool/host_pool.h"

#include <algorithm>
#include <set>

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>
#include <xxhash.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "daemon/common/format_bytes.h"
#include "daemon/common/logging.h"
#include "daemon/common/random_id.h"
#include "daemon/common/status_macros.h"
#include "daemon/pool/host_pinning.h"

namespace ddo {
std::string PoolNamespace(const std::string& socket_path) {
  return absl::StrFormat("%012x",
                         XXH3_64bits(socket_path.data(), socket_path.size()) & 0xffffffffffffULL);
}

HostPool::HostPool(PoolOptions options)
    : options_(std::move(options)),
      file_system_(options_.file_system != nullptr ? options_.file_system
                                                   : FileSystem::Default()),
      name_prefix_(absl::StrCat("/ddo-", ::geteuid(), "-", options_.name_namespace, "-")) {}

uint64_t HostPool::RoomLocked() const {
  return options_.budget_bytes - std::min(outside_bytes_, options_.budget_bytes);
}

absl::Status HostPool::RoomErrorLocked(uint64_t bytes) const {
  const uint64_t taken = reserved_bytes_ + reserve_bytes_;
  const std::string outside =
      outside_bytes_ == 0
          ? std::string()
          : absl::StrCat(", held by ddod and its runners outside the pool ",
                         FormatBytes(outside_bytes_));
  return absl::ResourceExhaustedError(absl::StrCat(
      "the host pool cannot hold ", FormatBytes(bytes), " more: budget ",
      FormatBytes(options_.budget_bytes), outside, ", reserved ", FormatBytes(reserved_bytes_),
      ", free ", FormatBytes(RoomLocked() - std::min(taken, RoomLocked())),
      " (raise --ram-budget-gb or evict components)"));
}

PoolYielder* HostPool::YielderForLocked(uint64_t bytes) const {
  if (reserve_bytes_ == 0 || bytes > RoomLocked() || reserved_bytes_ > RoomLocked() - bytes) {
    return nullptr;
  }
  return yielder_.load();
}

absl::Status HostPool::Reserve(uint64_t bytes, bool checked) {
  for (bool asked = false;; asked = true) {
    PoolYielder* yielder = nullptr;
    {
      absl::MutexLock lock(&mu_);
      if (!checked || reserved_bytes_ + reserve_bytes_ + bytes <= RoomLocked()) {
        reserved_bytes_ += bytes;
        ++segments_;
        return absl::OkStatus();
      }
      if (!asked) yielder = YielderForLocked(bytes);
      if (yielder == nullptr) return RoomErrorLocked(bytes);
    }
    yielder->Yield();  // outside mu_: the reserve's segment gives its bytes back through it
  }
}

void HostPool::Release(uint64_t bytes, uint64_t pinned_bytes, bool in_reserve) {
  absl::MutexLock lock(&mu_);
  if (in_reserve) {
    reserve_bytes_ -= bytes;
  } else {
    reserved_bytes_ -= bytes;
    --segments_;
  }
  pinned_bytes_ -= pinned_bytes;
}

void HostPool::CountPinned(uint64_t bytes) {
  absl::MutexLock lock(&mu_);
  pinned_bytes_ += bytes;
}

void HostPool::CountUnpinned(uint64_t bytes) {
  absl::MutexLock lock(&mu_);
  pinned_bytes_ -= bytes;
}

bool HostPool::TryHold(uint64_t bytes) {
  for (bool asked = false;; asked = true) {
    PoolYielder* yielder = nullptr;
    {
      absl::MutexLock lock(&mu_);
      const uint64_t taken = reserved_bytes_ + reserve_bytes_;
      if (bytes <= RoomLocked() && taken <= RoomLocked() - bytes) {
        reserved_bytes_ += bytes;
        held_bytes_ += bytes;
        return true;
      }
      if (!asked) yielder = YielderForLocked(bytes);
      if (yielder == nullptr) return false;
    }
    yielder->Yield();
  }
}

void HostPool::ReleaseHold(uint64_t bytes) {
  absl::MutexLock lock(&mu_);
  const uint64_t released = std::min(bytes, held_bytes_);
  held_bytes_ -= released;
  reserved_bytes_ -= released;
}

void HostPool::SetOutsideBytes(uint64_t bytes) {
  PoolYielder* yielder = nullptr;
  {
    absl::MutexLock lock(&mu_);
    outside_bytes_ = bytes;
    const uint64_t taken = reserved_bytes_ + reserve_bytes_;
    if (reserve_bytes_ > 0 && taken > RoomLocked()) yielder = yielder_.load();
  }
  if (yielder != nullptr) yielder->Yield();  // outside mu_, as in Reserve
}

bool HostPool::Fits(uint64_t bytes) const {
  absl::MutexLock lock(&mu_);
  return reserved_bytes_ + Footprint(bytes) <= RoomLocked();
}

PoolUsage HostPool::Usage() const {
  absl::MutexLock lock(&mu_);
  return {options_.budget_bytes, reserved_bytes_, held_bytes_, pinned_bytes_, segments_,
          reserve_bytes_, outside_bytes_};
}

absl::StatusOr<std::shared_ptr<PoolSegment>> HostPool::Allocate(uint64_t bytes,
                                                                 WorkProgress* progress,
                                                                 SegmentPages pages) {
  const uint64_t size = Footprint(bytes);
  DDO_RETURN_IF_ERROR(Reserve(size));
  if (progress != nullptr) progress->SetTotal(size);
  auto segment = SharedSegment::Create(absl::StrCat(name_prefix_, RandomId().substr(0, 16)), size,
                                       options_.populate_threads, file_system_, progress, pages);
  if (!segment.ok()) {
    Release(size, 0, /*in_reserve=*/false);
    return segment.status();
  }
  return std::shared_ptr<PoolSegment>(new PoolSegment(*this, *std::move(segment)));
}

absl::StatusOr<std::shared_ptr<PoolSegment>> HostPool::AllocateReserve(uint64_t bytes,
                                                                        WorkProgress* progress) {
  const uint64_t size = Footprint(bytes);
  {
    absl::MutexLock lock(&mu_);
    if (reserved_bytes_ + reserve_bytes_ + size > RoomLocked()) {
      return RoomErrorLocked(size);
    }
    reserve_bytes_ += size;
  }
  if (progress != nullptr) progress->SetTotal(size);
  auto segment = SharedSegment::Create(absl::StrCat(name_prefix_, RandomId().substr(0, 16)), size,
                                       options_.populate_threads, file_system_, progress,
                                       SegmentPages::kPopulated);
  if (!segment.ok()) {
    Release(size, 0, /*in_reserve=*/true);
    return segment.status();
  }
  auto reserve = std::shared_ptr<PoolSegment>(
      new PoolSegment(*this, *std::move(segment), /*prefaulted=*/true, /*in_reserve=*/true));
  // Never adopted by a later ddod: it holds nothing until it is taken.
  reserve->MarkDiscarded();
  return reserve;
}

absl::Status HostPool::PinReserve(PoolSegment& segment, uint64_t grid, WorkProgress* progress) {
  if (!options_.pin || grid == 0) return absl::OkStatus();
  segment.pin_grid_.store(grid);
  for (uint64_t offset = 0; offset < segment.size(); offset += grid) {
    if (progress != nullptr && progress->cancelled()) return absl::CancelledError("yielded");
    DDO_RETURN_IF_ERROR(segment.PinRange(offset, std::min(grid, segment.size() - offset)));
  }
  return absl::OkStatus();
}

absl::Status HostPool::TakeFromReserve(PoolSegment& segment, uint64_t bytes) {
  const uint64_t whole = segment.size();
  const uint64_t kept = std::min(Footprint(bytes), whole);
  // Pinned pages are never freed: the registrations past the cut go first.
  if (kept < whole) segment.UnpinFrom(kept);
  absl::Status shrunk = segment.segment_.Shrink(kept);
  const uint64_t size = shrunk.ok() ? kept : whole;
  absl::MutexLock lock(&mu_);
  reserve_bytes_ -= whole;
  reserved_bytes_ += size;
  ++segments_;
  segment.in_reserve_.store(false);
  // A component's from now on: a stopped ddod leaves it for the next one to adopt, as it does
  // every other component's (a reserve's is removed, since it holds nothing).
  segment.discard_.store(false);
  return shrunk;
}

absl::StatusOr<std::shared_ptr<PoolSegment>> HostPool::AllocateReplacement(
    const PoolSegment& replaced) {
  const uint64_t size = replaced.size();
  DDO_RETURN_IF_ERROR(Reserve(size, /*checked=*/false));
  auto segment = SharedSegment::Create(absl::StrCat(name_prefix_, RandomId().substr(0, 16)), size,
                                       1, file_system_, nullptr, SegmentPages::kNone);
  if (!segment.ok()) {
    Release(size, 0, /*in_reserve=*/false);
    return segment.status();
  }
  return std::shared_ptr<PoolSegment>(new PoolSegment(*this, *std::move(segment)));
}

absl::StatusOr<std::shared_ptr<PoolSegment>> HostPool::Adopt(const std::string& name) {
  DDO_ASSIGN_OR_RETURN(SharedSegment segment, SharedSegment::Open(name, file_system_));
  DDO_RETURN_IF_ERROR(Reserve(segment.size()));
  return std::shared_ptr<PoolSegment>(new PoolSegment(*this, std::move(segment)));
}

std::vector<std::string> HostPool::ListSegmentNames() const {
  std::vector<std::string> names;
  DIR* dir = ::opendir("/dev/shm");
  if (dir == nullptr) {
    return names;
  }
  const std::string prefix = name_prefix_.substr(1);  // without the leading '/'
  while (const dirent* entry = ::readdir(dir)) {
    if (absl::StartsWith(entry->d_name, prefix)) {
      names.push_back(absl::StrCat("/", entry->d_name));
    }
  }
  ::closedir(dir);
  return names;
}

absl::Status PoolSegment::Pin() {
  if (pinned_.load() || !pool_.options().pin) {
    return absl::OkStatus();
  }
  absl::MutexLock lock(&pin_mu_);
  if (pinned_ranges_.empty()) {
    PreTouchPages(data(), size(), pool_.options().pretouch_threads);
    return PinLocked(0, size());
  }
  // The gaps the ranges left, each registered on its own.
  return PinGapsLocked(0, size());
}

bool PoolSegment::pool_pins() const { return pool_.options().pin; }

absl::Status PoolSegment::PinRange(uint64_t offset, uint64_t bytes) {
  if (!pool_.options().pin || bytes == 0) return absl::OkStatus();
  if (offset > size() || bytes > size() - offset) {
    return absl::InvalidArgumentError(absl::StrCat("pin range ", offset, "+", bytes, " is outside ",
                                                   name(), " (", size(), " bytes)"));
  }
  absl::MutexLock lock(&pin_mu_);
  return PinGapsLocked(offset, offset + bytes);
}

absl::Status PoolSegment::PinGapsLocked(uint64_t offset, uint64_t end) {
  std::vector<std::pair<uint64_t, uint64_t>> ranges = pinned_ranges_;
  std::sort(ranges.begin(), ranges.end());
  uint64_t cursor = offset;
  for (const auto& [start, bytes] : ranges) {
    if (start + bytes <= cursor) continue;
    if (start >= end) break;
    if (start > cursor) DDO_RETURN_IF_ERROR(PinNewLocked(cursor, start - cursor));
    cursor = std::max(cursor, start + bytes);
  }
  if (cursor < end) DDO_RETURN_IF_ERROR(PinNewLocked(cursor, end - cursor));
  // No gap at all (a reserve taken at a part boundary keeps whole parts): pinned all the same.
  if (pinned_bytes_ == size()) pinned_.store(true);
  return absl::OkStatus();
}

absl::Status PoolSegment::PinNewLocked(uint64_t offset, uint64_t bytes) {
  // A pre-faulted segment's pages are mapped already: walking them again would only cost time
  // (MADV_POPULATE_WRITE of mapped pages: 0.05 s a GiB on the 2-core development machine).
  if (!prefaulted_) PreTouchPages(data() + offset, bytes, 1);
  return PinLocked(offset, bytes);
}

SegmentExtents PoolSegment::PinnedRanges() {
  absl::MutexLock lock(&pin_mu_);
  SegmentExtents ranges = pinned_ranges_;
  std::sort(ranges.begin(), ranges.end());
  return ranges;
}

void PoolSegment::UnpinCrossed(const SegmentExtents& extents) {
  absl::MutexLock lock(&pin_mu_);
  if (pinned_ranges_.empty()) return;
  std::vector<std::pair<uint64_t, uint64_t>> ranges = pinned_ranges_;
  std::sort(ranges.begin(), ranges.end());
  std::set<std::pair<uint64_t, uint64_t>> crossed;
  for (const auto& [offset, bytes] : extents) {
    if (bytes == 0) continue;
    const uint64_t end = offset + bytes;
    // The ranges the extent overlaps: crossed unless one holds it whole.
    auto first = std::upper_bound(ranges.begin(), ranges.end(), std::make_pair(offset, ~uint64_t{0}));
    if (first != ranges.begin()) --first;
    for (auto it = first; it != ranges.end() && it->first < end; ++it) {
      const uint64_t range_end = it->first + it->second;
      if (range_end <= offset) continue;
      if (it->first > offset || range_end < end) crossed.insert(*it);
    }
  }
  UnpinWhereLocked([&](uint64_t start, uint64_t bytes) {
    return crossed.count({start, bytes}) != 0;
  });
}

void PoolSegment::UnpinFrom(uint64_t offset) {
  absl::MutexLock lock(&pin_mu_);
  UnpinWhereLocked([offset](uint64_t start, uint64_t bytes) { return start + bytes > offset; });
}

void PoolSegment::UnpinWhereLocked(
    const std::function<bool(uint64_t offset, uint64_t bytes)>& unpin) {
  uint64_t unpinned = 0;
  std::vector<std::pair<uint64_t, uint64_t>> kept;
  for (const auto& [start, bytes] : pinned_ranges_) {
    if (unpin(start, bytes)) {
      UnpinHostRange(data() + start, bytes);
      unpinned += bytes;
    } else {
      kept.emplace_back(start, bytes);
    }
  }
  pinned_ranges_ = std::move(kept);
  if (unpinned == 0) return;
  pinned_bytes_ -= unpinned;
  pinned_.store(false);
  pool_.CountUnpinned(unpinned);
}

absl::Status PoolSegment::PinLocked(uint64_t offset, uint64_t bytes) {
  DDO_RETURN_IF_ERROR(PinHostRange(data() + offset, bytes));
  pinned_ranges_.emplace_back(offset, bytes);
  pinned_bytes_ += bytes;
  pool_.CountPinned(bytes);
  if (pinned_bytes_ == size()) pinned_.store(true);
  return absl::OkStatus();
}

absl::StatusOr<UniqueFd> PoolSegment::OpenForWriting() const {
  return pool_.file_system().ShmOpen(name(), O_RDWR | O_CLOEXEC, 0);
}

PoolSegment::~PoolSegment() {
  uint64_t pinned_bytes = 0;
  {
    absl::MutexLock lock(&pin_mu_);
    for (const auto& [offset, bytes] : pinned_ranges_) UnpinHostRange(data() + offset, bytes);
    pinned_bytes = pinned_bytes_;
  }
  if (discard_.load()) {
    if (absl::Status unlinked = segment_.Unlink(); !unlinked.ok()) {
      Logger("pool")->warn("{}", unlinked.message());
    }
  }
  pool_.Release(size(), pinned_bytes, in_reserve_.load());
}

}  // namespace ddo
