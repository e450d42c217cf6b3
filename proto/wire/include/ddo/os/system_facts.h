// File: proto/wire/include/ddo/os/system_facts.h
//
// Small things ddod's common layer asks of the system: unpredictable bytes (lease ids,
// tokens, the random parts of segment names, which another local user must not guess) and
// whether its stderr is the system's log. (This process's id: process_watch.h.)
//
//   POSIX:   getrandom(2) (the kernel's pool; blocks only before it is first seeded),
//            systemd's JOURNAL_STREAM naming stderr's device and inode.
//   Windows: BCryptGenRandom with the system's preferred generator; no journal.
//
// Thread-safety: both may be called from any thread.
#ifndef DDO_OS_SYSTEM_FACTS_H_
#define DDO_OS_SYSTEM_FACTS_H_

#include <cstddef>

#include "absl/status/status.h"

namespace ddo::os {

// Fills `size` bytes at `bytes` from the system's cryptographic generator. Internal, with the
// system's reason, when the generator fails (an old kernel without getrandom): callers must
// not fall back to anything predictable.
absl::Status FillRandomBytes(void* bytes, size_t size);

// Whether this process's stderr is the journal stream systemd announced in JOURNAL_STREAM
// (lines then carry a syslog priority prefix and no time of their own). Always false on
// Windows.
bool StderrIsSystemJournal();

}  // namespace ddo::os

#endif  // DDO_OS_SYSTEM_FACTS_H_
