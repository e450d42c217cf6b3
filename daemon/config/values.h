// File: daemon/config/values.h
//
// Parsing of setting values, with the seed's rules: booleans are true only for 1, true, yes
// and on (case-insensitive, trimmed); sizes are GiB (2^30 bytes) as in every DDO_*_GB variable.
#ifndef DDO_DAEMON_CONFIG_VALUES_H_
#define DDO_DAEMON_CONFIG_VALUES_H_

#include <cstdint>
#include "absl/strings/string_view.h"

#include "absl/status/statusor.h"

namespace ddo {

inline constexpr double kBytesPerGiB = 1024.0 * 1024.0 * 1024.0;

// The seed's boolean rule: anything but 1/true/yes/on (including "") is false.
bool ParseSeedBool(absl::string_view text);

// A finite number >= 0. `what` names the flag or variable for the error message.
absl::StatusOr<double> ParseNonNegativeNumber(absl::string_view what, absl::string_view text);

// A process id > 1.
absl::StatusOr<int64_t> ParsePid(absl::string_view what, absl::string_view text);

uint64_t GiBToBytes(double gib);

}  // namespace ddo

#endif  // DDO_DAEMON_CONFIG_VALUES_H_
