// File: daemon/common/unique_fd.h
//
// Moved to proto/wire (shared with the C++ client); this forwarding header spares the daemon's
// includes a churn.
#ifndef DDO_DAEMON_COMMON_UNIQUE_FD_H_
#define DDO_DAEMON_COMMON_UNIQUE_FD_H_

#include "ddo/wire/unique_fd.h"

#endif  // DDO_DAEMON_COMMON_UNIQUE_FD_H_
