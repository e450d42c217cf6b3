// File: client-cpp/src/consumer/daemon_liveness.h
//
// Whether ddod's process still runs, as a waiting runner checks it between futex sleeps
// (the port of _process_alive in py/control_block.py).
//
// Thread-safety: any thread; ProcessAlive reads /proc and keeps no state.
#ifndef DDO_CLIENT_CONSUMER_DAEMON_LIVENESS_H_
#define DDO_CLIENT_CONSUMER_DAEMON_LIVENESS_H_

#include <cstdint>

namespace ddo::consumer {

// True while `pid` runs. A zombie (exited, not yet reaped by its parent) or a pid without a
// /proc entry is gone; when /proc cannot tell, kill(pid, 0) decides (EPERM: alive).
bool ProcessAlive(int64_t pid);

}  // namespace ddo::consumer

#endif  // DDO_CLIENT_CONSUMER_DAEMON_LIVENESS_H_
