// File: daemon/stream/staging_buffers.cc
#include "daemon/stream/staging_buffers.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "daemon/common/format_bytes.h"
#include "daemon/pool/host_pinning.h"

namespace ddo {
namespace {

uint64_t RoundUpToPages(uint64_t bytes) {
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  return (bytes + page - 1) / page * page;
}

}  // namespace

absl::StatusOr<std::unique_ptr<StagingBuffers>> StagingBuffers::Create(uint32_t count,
                                                                        uint64_t bytes, bool pin,
                                                                        HostPool* ram) {
  if (count == 0 || bytes == 0) {
    return absl::InvalidArgumentError("staging needs at least one buffer of at least one byte");
  }
  const uint64_t stride = RoundUpToPages(bytes);
  const uint64_t total = stride * count;
  if (ram != nullptr && !ram->TryHold(total)) {
    const PoolUsage usage = ram->Usage();
    return absl::ResourceExhaustedError(absl::StrCat(
        "the file tier's staging (", count, " x ", FormatBytes(stride), ") does not fit ddod's ",
        "RAM budget of ", FormatBytes(usage.budget_bytes), ", of which ",
        FormatBytes(usage.budget_bytes - usage.free_bytes()),
        " is held; raise --ram-budget-gb or evict components"));
  }
  void* mapped = ::mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mapped == MAP_FAILED) {
    const int error = errno;
    if (ram != nullptr) ram->ReleaseHold(total);
    return absl::ResourceExhaustedError(
        absl::StrCat("mapping ", FormatBytes(total), " of staging: ", std::strerror(error)));
  }
  char* base = static_cast<char*>(mapped);
  (void)::madvise(base, total, MADV_HUGEPAGE);  // fewer TLB misses; a hint only
  PreTouchPages(base, total, 1);
  bool pinned = false;
  if (pin && HostPinningAvailable()) {
    if (absl::Status locked = PinHostRange(base, total); !locked.ok()) {
      ::munmap(base, total);
      if (ram != nullptr) ram->ReleaseHold(total);
      return locked;
    }
    pinned = true;
  }
  return std::unique_ptr<StagingBuffers>(new StagingBuffers(base, stride, count, pinned, ram));
}

StagingBuffers::~StagingBuffers() {
  const uint64_t total = total_bytes();
  if (pinned_) UnpinHostRange(base_, total);
  ::munmap(base_, total);
  if (ram_ != nullptr) ram_->ReleaseHold(total);
}

std::optional<uint32_t> StagingBuffers::Acquire() {
  for (uint32_t index = 0; index < taken_.size(); ++index) {
    if (!taken_[index]) {
      taken_[index] = true;
      return index;
    }
  }
  return std::nullopt;
}

void StagingBuffers::Release(uint32_t index) {
  if (index < taken_.size()) taken_[index] = false;
}

}  // namespace ddo
