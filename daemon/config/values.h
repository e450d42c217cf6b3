// File: daemon/config/values.h
//
// Parsing of setting values, with the seed's rules: booleans are true only for 1, true, yes
// and on (case-insensitive, trimmed); sizes are GiB (2^30 bytes) as in every DDO_*_GB variable.
// Every number is finite and inside a documented range, so that converting it to bytes never
// overflows (DDO_SMALL_TENSOR_THRESHOLD_KB=1e308 was accepted once). Error messages show at
// most a short escaped prefix of the value.
//
// Thread-safety: pure functions, safe from any thread.
#ifndef DDO_DAEMON_CONFIG_VALUES_H_
#define DDO_DAEMON_CONFIG_VALUES_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ddo {

inline constexpr double kBytesPerGiB = 1024.0 * 1024.0 * 1024.0;
// The largest GiB value any size setting or flag takes: 1 PiB (2^50 bytes, the largest
// component too).
inline constexpr double kMaxGiB = 1048576;

// The seed's boolean rule: anything but 1/true/yes/on (including "") is false.
bool ParseSeedBool(absl::string_view text);

// A finite number of GiB from 0 to kMaxGiB. `what` names the flag or variable for the error
// message.
absl::StatusOr<double> ParseNonNegativeNumber(absl::string_view what, absl::string_view text);

// A finite number from `min` to `max` (inclusive). InvalidArgument names `what` and the range.
absl::StatusOr<double> ParseNumberInRange(absl::string_view what, absl::string_view text,
                                          double min, double max);

// A process id > 1.
absl::StatusOr<int64_t> ParsePid(absl::string_view what, absl::string_view text);

// A range bound or setting value as people write it: whole numbers in full ("1048576", not
// StrCat's "1.04858e+06"), others as StrCat prints them ("0.25").
std::string FormatNumber(double value);

// Rounded to the nearest byte; values outside 0..kMaxGiB (or NaN) are clamped into it.
uint64_t GiBToBytes(double gib);

}  // namespace ddo

#endif  // DDO_DAEMON_CONFIG_VALUES_H_
