// File: daemon/pool/host_pinning.h
//
// Page-locking pool segments for fast, asynchronous host-to-device copies. With CUDA, a range
// is registered with cudaHostRegister (portable, so every context sees it) in chunks of at most
// 64 GiB (single registrations of hundreds of GiB fail on recent drivers), after the pages
// have been touched in parallel (registration of untouched memory faults it in one thread).
// Without CUDA nothing is pinned and every call reports so.
//
// Thread-safety: the functions may be called concurrently for different ranges.
#ifndef DDO_DAEMON_POOL_HOST_PINNING_H_
#define DDO_DAEMON_POOL_HOST_PINNING_H_

#include <cstdint>

#include "absl/status/status.h"

namespace ddo {

inline constexpr uint64_t kMaxPinChunkBytes = 64ull << 30;

// Faults every page of [data, data + size) in, from `threads` threads, without changing it.
void PreTouchPages(char* data, uint64_t size, int threads);

// True when this build can pin and a CUDA device is usable.
bool HostPinningAvailable();

// Registers [data, data + size) chunk by chunk; on failure unregisters what was registered and
// returns the CUDA error, naming the chunk.
absl::Status PinHostRange(char* data, uint64_t size);

// Undoes PinHostRange for the same range. Errors are logged, never thrown.
void UnpinHostRange(char* data, uint64_t size);

}  // namespace ddo

#endif  // DDO_DAEMON_POOL_HOST_PINNING_H_
