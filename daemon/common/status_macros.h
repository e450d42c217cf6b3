// File: daemon/common/status_macros.h
//
// Early-return helpers for absl::Status / absl::StatusOr. Debian 12's Abseil (20220623)
// predates ABSL_RETURN_IF_ERROR, so DDO carries its own two macros.
//
//   DDO_RETURN_IF_ERROR(pool.Reserve(bytes));
//   DDO_ASSIGN_OR_RETURN(auto lock, InstanceLock::Acquire(path));
//
// DDO_ASSIGN_OR_RETURN expands to several statements: it cannot be the body of an unbraced if.
//
// Thread-safety: nothing to say: macros, no state.
#ifndef DDO_DAEMON_COMMON_STATUS_MACROS_H_
#define DDO_DAEMON_COMMON_STATUS_MACROS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define DDO_RETURN_IF_ERROR(expr)                   \
  do {                                              \
    if (absl::Status ddo_status_ = (expr); !ddo_status_.ok()) { \
      return ddo_status_;                           \
    }                                               \
  } while (false)

#define DDO_STATUS_CONCAT_INNER_(a, b) a##b
#define DDO_STATUS_CONCAT_(a, b) DDO_STATUS_CONCAT_INNER_(a, b)

#define DDO_ASSIGN_OR_RETURN(lhs, rexpr) \
  DDO_ASSIGN_OR_RETURN_IMPL_(DDO_STATUS_CONCAT_(ddo_statusor_, __LINE__), lhs, rexpr)

#define DDO_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, rexpr) \
  auto statusor = (rexpr);                               \
  if (!statusor.ok()) {                                  \
    return std::move(statusor).status();                 \
  }                                                      \
  lhs = *std::move(statusor)

#endif  // DDO_DAEMON_COMMON_STATUS_MACROS_H_
