// File: proto/wire/include/ddo/os/shared_word.h
//
// Waiting on a 32-bit word of shared memory until another process changes it: what a runner's
// consumer does for a ring slot and ddod for a slot's release, when they wait on the CPU.
//
//   Linux:   a futex on the word (ddo/wire/futex.h: FUTEX_WAIT / FUTEX_WAKE without
//            FUTEX_PRIVATE_FLAG, keyed by the physical page, so wakes cross processes). The
//            signal object carries nothing.
//   Windows: WaitOnAddress reaches threads of one process only, so each word that is waited
//            on across processes has a named auto-reset event beside it ("Local\<name>", with
//            the owner-only DACL of ddo/os/shared_memory.h). Wake sets it; a waiter sleeps on it
//            in slices and re-reads the word after each. One waiter per word is woken at once
//            (the ring's protocol has one: the runner for "ready", ddod for "released"); any
//            other sees the change within a slice (1 ms).
//
// Either way Wait returns when woken, when the word differs, or at the timeout, and may return
// early: callers re-read the word.
//
// Thread-safety: Wait and Wake may be called from any thread of any process that holds the
// signal and the word.
#ifndef DDO_OS_SHARED_WORD_H_
#define DDO_OS_SHARED_WORD_H_

#include <atomic>
#include <cstdint>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "ddo/os/native_handle.h"

namespace ddo::os {

class SharedWordSignal {
 public:
  // Makes the signal `name` (a segment name's rules; AlreadyExists when taken on Windows).
  static absl::StatusOr<SharedWordSignal> Create(const std::string& name);
  // Opens the signal another process made. NotFound when there is none (Windows).
  static absl::StatusOr<SharedWordSignal> Open(const std::string& name);

  SharedWordSignal(SharedWordSignal&&) noexcept = default;
  SharedWordSignal& operator=(SharedWordSignal&&) noexcept = default;

  // Sleeps while *word == expected, for at most `timeout`.
  void Wait(const std::atomic<uint32_t>* word, uint32_t expected, absl::Duration timeout) const;
  // Wakes a waiter on *word (every waiter on Linux).
  void Wake(const std::atomic<uint32_t>* word) const;

 private:
  explicit SharedWordSignal(NativeHandle event) : event_(std::move(event)) {}

  NativeHandle event_;  // Windows: the named event; Linux: none
};

}  // namespace ddo::os

#endif  // DDO_OS_SHARED_WORD_H_
