// File: proto/wire/src/os/windows/windows_error.h
//
// The one place where Windows error codes (GetLastError) become absl::Status, as
// ddo/wire/posix_error.h does for errno. The message names what was being done and the
// system's words for the error.
//
// Thread-safety: any thread: it formats the code it is given.
#ifndef DDO_OS_WINDOWS_WINDOWS_ERROR_H_
#define DDO_OS_WINDOWS_WINDOWS_ERROR_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace ddo::os {

// ERROR_FILE_NOT_FOUND / ERROR_PATH_NOT_FOUND / ERROR_INVALID_PARAMETER from OpenProcess ->
// NotFound, ERROR_ACCESS_DENIED -> PermissionDenied, ERROR_ALREADY_EXISTS -> AlreadyExists,
// ERROR_NOT_ENOUGH_MEMORY / ERROR_COMMITMENT_LIMIT -> ResourceExhausted, anything else ->
// Internal.
absl::Status WindowsError(absl::string_view context, uint32_t code);

// UTF-16 of a UTF-8 string (names and account names cross into the W APIs as UTF-16).
std::wstring Widen(absl::string_view text);
// UTF-8 of a UTF-16 string.
std::string Narrow(const std::wstring& text);

}  // namespace ddo::os

#endif  // DDO_OS_WINDOWS_WINDOWS_ERROR_H_
