// File: daemon/common/random_id.h
//
// Unguessable ids from the system's random source: lease ids, tokens, session ids and the
// random parts of segment names, which other local users must not be able to predict.
//
// Thread-safety: RandomId may be called from any thread.
#ifndef DDO_DAEMON_COMMON_RANDOM_ID_H_
#define DDO_DAEMON_COMMON_RANDOM_ID_H_

#include <string>

namespace ddo {

// 128 random bits from the system's generator (ddo/os/system_facts.h) as 32 lowercase hex
// digits. Aborts when the system cannot give them: ddod never hands out guessable ids.
std::string RandomId();

}  // namespace ddo

#endif  // DDO_DAEMON_COMMON_RANDOM_ID_H_
