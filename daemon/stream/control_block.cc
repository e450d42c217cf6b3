// File: daemon/stream/control_block.cc
#include "daemon/stream/control_block.h"

#include <unistd.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "daemon/common/status_macros.h"

namespace ddo {

void FutexWait(const std::atomic<uint32_t>* word, uint32_t expected, absl::Duration timeout) {
  FutexWait(word, expected, absl::ToInt64Nanoseconds(timeout));
}

absl::StatusOr<ControlBlock> ControlBlock::Create(const std::string& name, uint32_t slots,
                                                  uint32_t units, uint64_t arena_bytes) {
  DDO_ASSIGN_OR_RETURN(SharedSegment segment,
                       SharedSegment::Create(name, RoundUpToSegmentGranularity(LayoutBytes(slots))));
  char* base = segment.data();
  std::memset(base, 0, LayoutBytes(slots));
  const uint32_t version = control_layout::kVersion;
  const int64_t pid = ::getpid();
  std::memcpy(base + control_layout::kVersionOffset, &version, 4);
  std::memcpy(base + control_layout::kSlotsOffset, &slots, 4);
  std::memcpy(base + control_layout::kUnitsOffset, &units, 4);
  std::memcpy(base + control_layout::kDaemonPidOffset, &pid, 8);
  std::memcpy(base + control_layout::kArenaBytesOffset, &arena_bytes, 8);
  ControlBlock block(std::move(segment), slots);
  for (uint32_t slot = 0; slot <= slots; ++slot) block.slot_use(slot).store(control_layout::kNoUse);
  block.slot_offset(slots).store(arena_bytes);  // the out-of-schedule slot never moves
  // The magic last: a runner that sees it sees an initialised block.
  block.U32(control_layout::kMagicOffset).store(control_layout::kMagic);
  return block;
}

ControlBlock::~ControlBlock() {
  if (segment_.data() != nullptr) (void)segment_.Unlink();
}

void ControlBlock::set_schedule_length(uint32_t length) {
  U32(control_layout::kScheduleLengthOffset).store(length);
}

void ControlBlock::set_state(SessionState state) {
  U32(control_layout::kStateOffset).store(static_cast<uint32_t>(state));
  WakeRunner();
}

void ControlBlock::WakeRunner() {
  // seq_cst store of the counter (by the caller) before this load: a runner that announced its
  // sleep before our store is seen here; one that announces later re-checks the counter.
  if (runner_waiting().load() != 0) {
    FutexWakeAll(LowWord(&ready()));
    FutexWakeAll(LowWord(&sync_done()));
  }
}

absl::StatusOr<Doorbell> Doorbell::Create(const std::string& name) {
  DDO_ASSIGN_OR_RETURN(SharedSegment segment,
                       SharedSegment::Create(name, RoundUpToSegmentGranularity(doorbell_layout::kBytes)));
  std::memset(segment.data(), 0, doorbell_layout::kBytes);
  Doorbell doorbell(std::move(segment));
  doorbell.view().magic().store(doorbell_layout::kMagic);
  return doorbell;
}

Doorbell::~Doorbell() {
  if (segment_.data() != nullptr) (void)segment_.Unlink();
}

void Doorbell::Ring() {
  seq().fetch_add(1);
  FutexWakeAll(&seq());
}

}  // namespace ddo
