// File: daemon/common/display_text.h
//
// Moved to proto/wire (shared with the C++ client); this forwarding header spares the daemon's
// includes a churn.
#ifndef DDO_DAEMON_COMMON_DISPLAY_TEXT_H_
#define DDO_DAEMON_COMMON_DISPLAY_TEXT_H_

#include "ddo/wire/display_text.h"

#endif  // DDO_DAEMON_COMMON_DISPLAY_TEXT_H_
