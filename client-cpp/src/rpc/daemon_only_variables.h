// File: client-cpp/src/rpc/daemon_only_variables.h
//
// ddod's own process options (docs/configuration.md §1) that are no per-call setting: a private
// ddod keeps them, and every other DDO_* variable is stripped from its environment. The same
// table as DAEMON_ONLY_VARIABLES in client-python/.../embedded.py;
// tests/python/test_client_cpp_rpc.py holds the two equal.
//
// Thread-safety: an immutable table, readable from any thread.
#ifndef DDO_CLIENT_RPC_DAEMON_ONLY_VARIABLES_H_
#define DDO_CLIENT_RPC_DAEMON_ONLY_VARIABLES_H_

namespace ddo {

inline constexpr const char* kDaemonOnlyVariables[] = {
    "DDO_RAM_BUDGET_GB",
    "DDO_STATE_DIR",
    "DDO_PLATFORM",
    "DDO_HOST_DEVICES",
    "DDO_LISTEN",
    "DDO_SOCKET_GROUP",
    "DDO_LOG_LEVEL",
    "DDO_MAX_LEASES_PER_USER",
    "DDO_MAX_UPLOADS_PER_USER",
    "DDO_MAX_SESSIONS_PER_USER",
    "DDO_MAX_USER_POOL_GB",
};

}  // namespace ddo

#endif  // DDO_CLIENT_RPC_DAEMON_ONLY_VARIABLES_H_
