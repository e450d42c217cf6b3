// File: daemon/layout/dtype.cc
#include "daemon/layout/dtype.h"

#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace ddo {
namespace {

struct DTypeInfo {
  DType dtype;
  const char* safetensors_name;
  size_t size;
};

// Indexed by the enum's value (checked below), so lookups by DType need no search.
constexpr DTypeInfo kDTypes[] = {
    {DType::kF64, "F64", 8},
    {DType::kF32, "F32", 4},
    {DType::kF16, "F16", 2},
    {DType::kBF16, "BF16", 2},
    {DType::kF8E4M3, "F8_E4M3", 1},
    {DType::kF8E5M2, "F8_E5M2", 1},
    {DType::kI64, "I64", 8},
    {DType::kI32, "I32", 4},
    {DType::kI16, "I16", 2},
    {DType::kI8, "I8", 1},
    {DType::kU8, "U8", 1},
    {DType::kBool, "BOOL", 1},
    {DType::kU16, "U16", 2},
    {DType::kU32, "U32", 4},
    {DType::kU64, "U64", 8},
};

constexpr bool TableIsIndexedByEnum() {
  size_t i = 0;
  for (const DTypeInfo& info : kDTypes) {
    if (static_cast<size_t>(info.dtype) != i++) {
      return false;
    }
  }
  return i == static_cast<size_t>(DType::kU64) + 1;
}
static_assert(TableIsIndexedByEnum(), "kDTypes must list every DType in enum order");

const DTypeInfo& Info(DType dtype) { return kDTypes[static_cast<size_t>(dtype)]; }

}  // namespace

absl::StatusOr<DType> ParseSafetensorsDType(absl::string_view name) {
  for (const DTypeInfo& info : kDTypes) {
    if (name == info.safetensors_name) {
      return info.dtype;
    }
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown dtype \"", name, "\" (valid: ",
      absl::StrJoin(
          kDTypes, ", ",
          [](std::string* out, const DTypeInfo& info) { out->append(info.safetensors_name); }),
      ")"));
}

const char* SafetensorsDTypeName(DType dtype) { return Info(dtype).safetensors_name; }

size_t DTypeSize(DType dtype) { return Info(dtype).size; }

bool IsFloatingPoint(DType dtype) {
  switch (dtype) {
    case DType::kF64:
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16:
    case DType::kF8E4M3:
    case DType::kF8E5M2:
      return true;
    default:
      return false;
  }
}

absl::StatusOr<uint64_t> TensorByteSize(DType dtype, const std::vector<int64_t>& shape) {
  bool empty = false;
  for (const int64_t dim : shape) {
    if (dim < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("shape [", absl::StrJoin(shape, ", "), "] has a negative dimension"));
    }
    empty = empty || dim == 0;
  }
  if (empty) {
    return uint64_t{0};
  }
  constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
  uint64_t bytes = DTypeSize(dtype);
  for (const int64_t dim : shape) {
    const uint64_t factor = static_cast<uint64_t>(dim);
    if (bytes > kMax / factor) {
      return absl::InvalidArgumentError(absl::StrCat("shape [", absl::StrJoin(shape, ", "), "] of ",
                                                     SafetensorsDTypeName(dtype),
                                                     " is too large (more than 2^64 - 1 bytes)"));
    }
    bytes *= factor;
  }
  return bytes;
}

}  // namespace ddo
