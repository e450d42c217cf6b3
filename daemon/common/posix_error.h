// File: daemon/common/posix_error.h
//
// Moved to proto/wire (shared with the C++ client); this forwarding header spares the daemon's
// includes a churn.
#ifndef DDO_DAEMON_COMMON_POSIX_ERROR_H_
#define DDO_DAEMON_COMMON_POSIX_ERROR_H_

#include "ddo/wire/posix_error.h"

#endif  // DDO_DAEMON_COMMON_POSIX_ERROR_H_
