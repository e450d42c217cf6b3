// File: client-cpp/src/torch/dtypes.cc
#include "client-cpp/src/torch/dtypes.h"

#include <torch/version.h>

namespace ddo::detail {
namespace {

struct DtypePair {
  int code;
  c10::ScalarType type;
};

// ddo.v1.DType numbers (proto/ddo/v1/components.proto).
constexpr DtypePair kPairs[] = {
    {1, c10::ScalarType::Double},
    {2, c10::ScalarType::Float},
    {3, c10::ScalarType::Half},
    {4, c10::ScalarType::BFloat16},
#if TORCH_VERSION_MAJOR >= 2
    {5, c10::ScalarType::Float8_e4m3fn},
    {6, c10::ScalarType::Float8_e5m2},
#endif
    {7, c10::ScalarType::Long},
    {8, c10::ScalarType::Int},
    {9, c10::ScalarType::Short},
    {10, c10::ScalarType::Char},
    {11, c10::ScalarType::Byte},
    {12, c10::ScalarType::Bool},
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
    {13, c10::ScalarType::UInt16},
    {14, c10::ScalarType::UInt32},
    {15, c10::ScalarType::UInt64},
#endif
};

}  // namespace

std::optional<c10::ScalarType> TorchType(int dtype_code) {
  for (const DtypePair& pair : kPairs) {
    if (pair.code == dtype_code) return pair.type;
  }
  return std::nullopt;
}

std::optional<int> DtypeCode(c10::ScalarType type) {
  for (const DtypePair& pair : kPairs) {
    if (pair.type == type) return pair.code;
  }
  return std::nullopt;
}

std::string TypeName(c10::ScalarType type) {
  return c10::toString(type);
}

}  // namespace ddo::detail
