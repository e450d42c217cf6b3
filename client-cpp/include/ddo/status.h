// File: client-cpp/include/ddo/status.h
//
// How the C++ client reports failure. The non-throwing layer (ddo::RpcClient) returns
// ddo::Status / ddo::StatusOr<T>; the torch layer (ddo::Client, ddo::StreamingSession) throws
// ddo::Error and its subclasses. Both carry a StatusCode numbered as absl::StatusCode and
// grpc::StatusCode, and ddod's own message, so a runner sees what ddoctl and the Python client
// see. No absl, gRPC or torch in this header: a user's project needs none of them to include it.
//
// Thread-safety: value types: a Status or an Error is one caller's object; copies are independent.
#ifndef DDO_CLIENT_STATUS_H_
#define DDO_CLIENT_STATUS_H_

#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

namespace ddo {

// The canonical codes, with absl's and gRPC's numbers.
enum class StatusCode : int {
  kOk = 0,
  kCancelled = 1,
  kUnknown = 2,
  kInvalidArgument = 3,
  kDeadlineExceeded = 4,
  kNotFound = 5,
  kAlreadyExists = 6,
  kPermissionDenied = 7,
  kResourceExhausted = 8,
  kFailedPrecondition = 9,
  kAborted = 10,
  kOutOfRange = 11,
  kUnimplemented = 12,
  kInternal = 13,
  kUnavailable = 14,
  kDataLoss = 15,
  kUnauthenticated = 16,
};

// "INVALID_ARGUMENT" and so on, as gRPC and absl print them.
inline const char* StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "OK";
    case StatusCode::kCancelled: return "CANCELLED";
    case StatusCode::kUnknown: return "UNKNOWN";
    case StatusCode::kInvalidArgument: return "INVALID_ARGUMENT";
    case StatusCode::kDeadlineExceeded: return "DEADLINE_EXCEEDED";
    case StatusCode::kNotFound: return "NOT_FOUND";
    case StatusCode::kAlreadyExists: return "ALREADY_EXISTS";
    case StatusCode::kPermissionDenied: return "PERMISSION_DENIED";
    case StatusCode::kResourceExhausted: return "RESOURCE_EXHAUSTED";
    case StatusCode::kFailedPrecondition: return "FAILED_PRECONDITION";
    case StatusCode::kAborted: return "ABORTED";
    case StatusCode::kOutOfRange: return "OUT_OF_RANGE";
    case StatusCode::kUnimplemented: return "UNIMPLEMENTED";
    case StatusCode::kInternal: return "INTERNAL";
    case StatusCode::kUnavailable: return "UNAVAILABLE";
    case StatusCode::kDataLoss: return "DATA_LOSS";
    case StatusCode::kUnauthenticated: return "UNAUTHENTICATED";
  }
  return "UNKNOWN";
}

class Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "NOT_FOUND: no component named 'x'", or "OK".
  std::string ToString() const {
    return ok() ? std::string("OK") : std::string(StatusCodeName(code_)) + ": " + message_;
  }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status OkStatus() { return Status(); }

// A value or the Status that explains why there is none. Construct from either.
template <typename T>
class StatusOr {
 public:
  StatusOr(Status status) : status_(std::move(status)) {  // NOLINT: implicit by design
    if (status_.ok()) status_ = Status(StatusCode::kInternal, "StatusOr built from an OK status");
  }
  StatusOr(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design

  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T& operator*() & { return *value_; }
  const T& operator*() const& { return *value_; }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }

 private:
  Status status_;
  std::optional<T> value_;
};

// The base of every exception the torch layer throws on purpose: catch one type.
class Error : public std::runtime_error {
 public:
  explicit Error(const Status& status)
      : std::runtime_error(status.message()), code_(status.code()) {}
  Error(StatusCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
  StatusCode code() const { return code_; }
  Status status() const { return Status(code_, what()); }

 private:
  StatusCode code_;
};

// An attached component does not fit the module it is bound to (names listed in the message).
class BindError : public Error {
 public:
  using Error::Error;
};

// The daemon, its socket or its process belongs to a user the client does not trust.
class UntrustedDaemonError : public Error {
 public:
  using Error::Error;
};

// A streaming session cannot go on.
class StreamingError : public Error {
 public:
  using Error::Error;
};

// A CUDA graph capture reached a streamed module: a replayed graph would replay the weights of
// the captured pass.
class GraphCaptureError : public StreamingError {
 public:
  using StreamingError::StreamingError;
};

// ddod closed or failed the session (its state word says which).
class SessionClosedError : public StreamingError {
 public:
  using StreamingError::StreamingError;
};

// ddod's process is gone.
class DaemonGoneError : public StreamingError {
 public:
  using StreamingError::StreamingError;
};

// Throws ddo::Error carrying `status` unless it is OK.
inline void ThrowIfError(const Status& status) {
  if (!status.ok()) throw Error(status);
}

template <typename T>
T ValueOrThrow(StatusOr<T> result) {
  ThrowIfError(result.status());
  return std::move(result).value();
}

}  // namespace ddo

#endif  // DDO_CLIENT_STATUS_H_
