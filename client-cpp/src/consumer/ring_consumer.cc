// File: client-cpp/src/consumer/ring_consumer.cc
#include "client-cpp/src/consumer/ring_consumer.h"

#include <utility>

#include "ddo/status.h"

namespace ddo::consumer {
namespace {

// Python's repr of a list of ints: "[3, 7]".
std::string ListText(const std::vector<uint32_t>& values) {
  std::string text = "[";
  for (size_t i = 0; i < values.size(); ++i) {
    if (i > 0) text += ", ";
    text += std::to_string(values[i]);
  }
  return text + "]";
}

}  // namespace

RingConsumer::RingConsumer(RingConsumerOptions options)
    : block_(options.control, options.control_bytes, std::move(options.control_name),
             options.stall_timeout_ns, options.daemon_pid),
      doorbell_(options.doorbell, options.doorbell_bytes, std::move(options.doorbell_name)),
      slots_(block_.slots()),
      spans_(std::move(options.unit_spans)),
      record_consumed_(std::move(options.record_consumed)),
      before_switch_(std::move(options.before_switch)) {
  block_.CheckMatches(options.slots, options.units, options.arena_bytes);
  if (spans_.size() != options.units) {
    throw Error(StatusCode::kInvalidArgument,
                "the consumer got " + std::to_string(spans_.size()) + " unit spans for " +
                    std::to_string(options.units) + " units");
  }
  if (static_cast<bool>(options.before_sleep) != static_cast<bool>(options.after_sleep)) {
    throw Error(StatusCode::kInvalidArgument, "sleep hooks come in pairs: both or neither");
  }
  if (options.before_sleep) {
    block_.SetSleepHooks(std::move(options.before_sleep), std::move(options.after_sleep));
  }
  if (!options.schedule.empty()) SetSchedule(std::move(options.schedule));
  // A consumer opened on a running session continues where the block stands.
  use_ = block_.view().consumed().load(std::memory_order_acquire);
  requests_ = block_.view().sync_request().load(std::memory_order_acquire);
}

uint64_t RingConsumer::Switch(uint32_t unit) {
  const int64_t started = NowNs();
  if (before_switch_) before_switch_();  // before anything of the ring is captured
  if (held_unit_ != kNothingHeld) ReleaseHeld();
  int64_t waited;
  if (learning_) {
    waited = AcquireOutOfSchedule(unit);
    order_.push_back(unit);
  } else {
    const uint64_t length = schedule_.size();
    if (schedule_[use_ % length] != unit) {
      for (uint64_t ahead = 1; ahead < slots_; ++ahead) {
        if (schedule_[(use_ + ahead) % length] == unit) {
          SkipTo(use_ + ahead);
          break;
        }
      }
    }
    if (schedule_[use_ % length] == unit) {
      waited = AcquireInSchedule(unit);
    } else {
      waited = AcquireOutOfSchedule(unit);
    }
  }
  stats_.uses += 1;
  stats_.bytes_used += spans_[unit];
  stats_.wait_ns += waited;
  stats_.overhead_ns += NowNs() - started - waited;
  return held_offset_;
}

int64_t RingConsumer::AcquireInSchedule(uint32_t unit) {
  const ControlView& view = block_.view();
  const uint64_t use = use_;
  const uint32_t slot = static_cast<uint32_t>(use % slots_);
  const int64_t waited = block_.WaitUntil(view.ready(), use + 1, "ready");
  block_.CheckSlot(slot, use, "use");
  held_unit_ = unit;
  held_offset_ = view.slot_offset(slot).load(std::memory_order_acquire);
  held_slot_ = slot;
  held_streamed_ = true;
  return waited;
}

int64_t RingConsumer::AcquireOutOfSchedule(uint32_t unit) {
  const ControlView& view = block_.view();
  const uint32_t slot = slots_;
  if (unit >= spans_.size()) {
    throw StreamingError(StatusCode::kInvalidArgument,
                         "unit " + std::to_string(unit) + " does not exist (the session has " +
                             std::to_string(spans_.size()) + " units)");
  }
  requests_ += 1;
  const uint64_t request = requests_;
  view.sync_unit().store(unit, std::memory_order_relaxed);
  view.sync_request().store(request, std::memory_order_release);  // after sync_unit
  doorbell_.Ring();
  const int64_t waited = block_.WaitUntil(view.sync_done(), request, "sync_done");
  block_.CheckSlot(slot, request, "request");
  stats_.sync_uses += 1;
  view.sync_uses().store(stats_.sync_uses, std::memory_order_relaxed);
  held_unit_ = unit;
  held_offset_ = view.slot_offset(slot).load(std::memory_order_acquire);
  held_slot_ = slot;
  held_streamed_ = false;
  return waited;
}

void RingConsumer::ReleaseHeld() {
  if (record_consumed_) record_consumed_(held_slot_);
  held_unit_ = kNothingHeld;
  if (held_streamed_) {
    use_ += 1;
    stats_.streamed_uses += 1;
    const ControlView& view = block_.view();
    view.consumed().store(use_, std::memory_order_release);
    view.consumed_uses().store(stats_.streamed_uses, std::memory_order_relaxed);
    doorbell_.RingIfSleeping();
  }
}

void RingConsumer::SkipTo(uint64_t use) {
  stats_.skipped_uses += use - use_;
  use_ = use;
  const ControlView& view = block_.view();
  view.consumed().store(use, std::memory_order_release);
  view.skipped_uses().store(stats_.skipped_uses, std::memory_order_relaxed);
  doorbell_.RingIfSleeping();
}

void RingConsumer::BeginForward() {
  if (held_unit_ != kNothingHeld) ReleaseHeld();
  if (learning_) {
    order_.clear();
  } else if (use_ % schedule_.size() != 0) {
    SkipTo((use_ / schedule_.size() + 1) * schedule_.size());
  }
}

std::vector<uint32_t> RingConsumer::EndForward() {
  Release();
  if (!learning_ || order_.empty()) return {};
  std::vector<uint32_t> order = std::move(order_);
  order_.clear();
  return order;
}

void RingConsumer::AdoptSchedule(std::vector<uint32_t> order, uint64_t accepted) {
  if (accepted != order.size()) {
    throw StreamingError(StatusCode::kInternal,
                         "ddod accepted a schedule of " + std::to_string(accepted) +
                             " uses per cycle, but the runner sent " +
                             std::to_string(order.size()));
  }
  SetSchedule(std::move(order));
  use_ = 0;
}

void RingConsumer::SetSchedule(std::vector<uint32_t> schedule) {
  std::vector<uint32_t> bad;
  for (uint32_t unit : schedule) {
    if (unit >= spans_.size() && bad.size() < 10) bad.push_back(unit);
  }
  if (!bad.empty()) {
    throw StreamingError(StatusCode::kInvalidArgument,
                         "the schedule names units " + ListText(bad) +
                             " that do not exist (the session has " +
                             std::to_string(spans_.size()) + " units)");
  }
  learning_ = schedule.empty();
  schedule_ = std::move(schedule);
}

}  // namespace ddo::consumer
