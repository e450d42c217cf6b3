// File: daemon/platform/process_footprint.h
//
// What a process holds in RAM of its own, as the OS reports it: the private memory that the
// RAM budget counts for ddod and the runners it serves (docs/configuration.md, "What the RAM
// budget bounds"). Linux: RssAnon of /proc/<pid>/status (shared memory, the pool's pages
// included, is RssShmem and not counted here); Windows: the private commit of
// GetProcessMemoryInfo.
//
// Thread-safety: any thread; every call reads the OS afresh and keeps nothing.
#ifndef DDO_DAEMON_PLATFORM_PROCESS_FOOTPRINT_H_
#define DDO_DAEMON_PLATFORM_PROCESS_FOOTPRINT_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ddo/os/user_ids.h"

namespace ddo {

struct ProcessFootprint {
  uint64_t private_bytes = 0;
  // When the process started, in the OS's units: comparable between two processes of one
  // boot, meaningless otherwise.
  uint64_t started = 0;
};

// The footprint of process `pid`. NOT_FOUND when it is gone; PERMISSION_DENIED when the OS
// hides it from ddod (Linux's hidepid, another user's process on Windows).
absl::StatusOr<ProcessFootprint> ReadProcessFootprint(pid_t pid);

// ddod's own.
absl::StatusOr<ProcessFootprint> ReadOwnFootprint();

// The parsers of the Linux files, pure so that tests can feed them anything: RssAnon of
// /proc/<pid>/status's text, in bytes; the start time (field 22) of /proc/<pid>/stat's.
absl::StatusOr<uint64_t> ParseStatusRssAnon(absl::string_view status_text);
absl::StatusOr<uint64_t> ParseStatStartTime(absl::string_view stat_text);

}  // namespace ddo

#endif  // DDO_DAEMON_PLATFORM_PROCESS_FOOTPRINT_H_
