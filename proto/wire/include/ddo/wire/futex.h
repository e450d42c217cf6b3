// File: proto/wire/include/ddo/wire/futex.h
//
// Linux futexes on words of a shared mapping (the control block, the doorbell). The operations
// are plain FUTEX_WAIT / FUTEX_WAKE without FUTEX_PRIVATE_FLAG: the kernel then keys the word
// by its physical page, so a wake in one process reaches a waiter in another.
//
// Thread-safety: any thread or process: these are futex system calls on words that others change
// concurrently; the caller re-reads the word after each wait.
#ifndef DDO_WIRE_FUTEX_H_
#define DDO_WIRE_FUTEX_H_

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <climits>
#include <cstdint>
#include <ctime>

namespace ddo {

// Sleeps while *word == expected, for at most `timeout_ns` (relative). Returns when woken,
// when the word differs, on a signal, or after the timeout: the caller re-reads the word.
inline void FutexWait(const std::atomic<uint32_t>* word, uint32_t expected, int64_t timeout_ns) {
  if (timeout_ns < 0) timeout_ns = 0;
  timespec relative{static_cast<time_t>(timeout_ns / 1000000000),
                    static_cast<long>(timeout_ns % 1000000000)};
  ::syscall(SYS_futex, reinterpret_cast<const uint32_t*>(word), FUTEX_WAIT, expected, &relative,
            nullptr, 0);
}

// Wakes every waiter on *word.
inline void FutexWakeAll(const std::atomic<uint32_t>* word) {
  ::syscall(SYS_futex, reinterpret_cast<const uint32_t*>(word), FUTEX_WAKE, INT_MAX, nullptr,
            nullptr, 0);
}

// The low 32 bits of a 64-bit counter, as a futex word (little-endian).
inline const std::atomic<uint32_t>* LowWord(const std::atomic<uint64_t>* counter) {
  return reinterpret_cast<const std::atomic<uint32_t>*>(counter);
}

}  // namespace ddo

#endif  // DDO_WIRE_FUTEX_H_
