// File: proto/wire/include/ddo/wire/posix_error.h
//
// The one place where errno values become absl::Status. The message names what was being
// done ("open /run/ddo/ddod.sock.lock") and the system's words for the error.
//
// Thread-safety: any thread: it formats the error number it is given, never reads errno, and
// copies glibc's std::strerror text (a constant string for every known number) at once.
#ifndef DDO_WIRE_POSIX_ERROR_H_
#define DDO_WIRE_POSIX_ERROR_H_

#include "absl/strings/string_view.h"

#include "absl/status/status.h"

namespace ddo {

// ENOENT -> NotFound, EACCES/EPERM -> PermissionDenied, EEXIST -> AlreadyExists,
// ENOMEM/ENOSPC -> ResourceExhausted, EINVAL -> InvalidArgument, anything else -> Internal.
absl::Status PosixError(absl::string_view context, int error_number);

}  // namespace ddo

#endif  // DDO_WIRE_POSIX_ERROR_H_
