// File: daemon/layout/dtype.h
//
// Element types of stored tensors: the safetensors names ("BF16", "F8_E4M3", ...), their
// sizes in bytes (service/tensor_proto.h maps them to and from the protocol's ddo.v1.DType).
//
// Thread-safety: pure functions, safe from any thread.
#ifndef DDO_DAEMON_LAYOUT_DTYPE_H_
#define DDO_DAEMON_LAYOUT_DTYPE_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ddo {

enum class DType {
  kF64,
  kF32,
  kF16,
  kBF16,
  kF8E4M3,
  kF8E5M2,
  kI64,
  kI32,
  kI16,
  kI8,
  kU8,
  kBool,
  kU16,
  kU32,
  kU64,
};

// "F64", "F32", "F16", "BF16", "F8_E4M3", "F8_E5M2", "I64", "I32", "I16", "I8", "U8", "BOOL",
// "U16", "U32", "U64" (case-sensitive, as safetensors writes them). Anything else is
// InvalidArgument with the list of valid names.
absl::StatusOr<DType> ParseSafetensorsDType(absl::string_view name);

// The safetensors name: ParseSafetensorsDType(SafetensorsDTypeName(d)) == d.
const char* SafetensorsDTypeName(DType dtype);

// Bytes per element (BOOL is one byte, as in safetensors).
size_t DTypeSize(DType dtype);

// F64, F32, F16, BF16 and the F8 types.
bool IsFloatingPoint(DType dtype);

// Elements x DTypeSize. An empty shape is a scalar (one element); any zero dimension makes
// the tensor empty. Negative dimensions and products past 2^64 - 1 are InvalidArgument.
absl::StatusOr<uint64_t> TensorByteSize(DType dtype, const std::vector<int64_t>& shape);

}  // namespace ddo

#endif  // DDO_DAEMON_LAYOUT_DTYPE_H_
