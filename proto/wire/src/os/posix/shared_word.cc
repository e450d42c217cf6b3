#include "ddo/os/shared_word.h"

#include <algorithm>

#include "ddo/os/shared_memory.h"
#include "ddo/wire/futex.h"

namespace ddo::os {

absl::StatusOr<SharedWordSignal> SharedWordSignal::Create(const std::string& name) {
  if (absl::Status valid = CheckSegmentName(name); !valid.ok()) return valid;
  return SharedWordSignal(NativeHandle());  // a futex needs nothing beside the word
}

absl::StatusOr<SharedWordSignal> SharedWordSignal::Open(const std::string& name) {
  return Create(name);
}

void SharedWordSignal::Wait(const std::atomic<uint32_t>* word, uint32_t expected,
                            absl::Duration timeout) const {
  if (word->load(std::memory_order_acquire) != expected) return;
  FutexWait(word, expected,
            std::max<int64_t>(0, absl::ToInt64Nanoseconds(std::min(timeout, absl::Hours(1)))));
}

void SharedWordSignal::Wake(const std::atomic<uint32_t>* word) const { FutexWakeAll(word); }

}  // namespace ddo::os
