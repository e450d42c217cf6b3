// File: client-cpp/src/torch/dtypes.h
//
// The protocol's dtype codes (ddo.v1.DType, docs/protocol.md) and torch's scalar types.
//
// Thread-safety: pure functions of their arguments, safe from any thread.
#ifndef DDO_CLIENT_TORCH_DTYPES_H_
#define DDO_CLIENT_TORCH_DTYPES_H_

#include <cstdint>
#include <optional>
#include <string>

#include <c10/core/ScalarType.h>

namespace ddo::detail {

// The torch type of a protocol dtype code; nullopt when this libtorch has none (fp8 and the
// wide unsigned types are newer than torch 1.13).
std::optional<c10::ScalarType> TorchType(int dtype_code);

// The protocol code of a torch type; nullopt for types the protocol has no code for
// (complex, quantized, ...).
std::optional<int> DtypeCode(c10::ScalarType type);

// "bfloat16", "float8_e4m3fn", ... (torch's spelling, for messages).
std::string TypeName(c10::ScalarType type);

}  // namespace ddo::detail

#endif  // DDO_CLIENT_TORCH_DTYPES_H_
