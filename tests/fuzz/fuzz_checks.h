// File: tests/fuzz/fuzz_checks.h
//
// Checks the fuzz targets share: a failed check aborts, which libFuzzer reports as a crash
// with the input that caused it.
//
// Thread-safety: stateless; the targets run single-threaded.
#ifndef DDO_TESTS_FUZZ_FUZZ_CHECKS_H_
#define DDO_TESTS_FUZZ_FUZZ_CHECKS_H_

#include <cstdio>
#include <cstdlib>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace ddo {

inline void FuzzCheck(bool condition, const char* what) {
  if (!condition) {
    std::fprintf(stderr, "fuzz check failed: %s\n", what);
    std::abort();
  }
}

// ddod's messages escape whatever they quote from a file: a refusal is printable ASCII only,
// never raw bytes of the input.
inline void CheckMessageIsClean(const absl::Status& status) {
  for (const char c : status.message()) {
    const auto byte = static_cast<unsigned char>(c);
    FuzzCheck(byte >= 0x20 && byte < 0x7f, "an error message holds a raw, unprintable byte");
  }
  FuzzCheck(status.code() == absl::StatusCode::kInvalidArgument,
            "a malformed input must be INVALID_ARGUMENT");
}

}  // namespace ddo

#endif  // DDO_TESTS_FUZZ_FUZZ_CHECKS_H_
