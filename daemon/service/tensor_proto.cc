// File: daemon/service/tensor_proto.cc
#include "daemon/service/tensor_proto.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "daemon/common/status_macros.h"

namespace ddo {
namespace {

constexpr std::pair<DType, ddo::v1::DType> kProtoDTypes[] = {
    {DType::kF64, ddo::v1::DTYPE_F64},         {DType::kF32, ddo::v1::DTYPE_F32},
    {DType::kF16, ddo::v1::DTYPE_F16},         {DType::kBF16, ddo::v1::DTYPE_BF16},
    {DType::kF8E4M3, ddo::v1::DTYPE_F8_E4M3},  {DType::kF8E5M2, ddo::v1::DTYPE_F8_E5M2},
    {DType::kI64, ddo::v1::DTYPE_I64},         {DType::kI32, ddo::v1::DTYPE_I32},
    {DType::kI16, ddo::v1::DTYPE_I16},         {DType::kI8, ddo::v1::DTYPE_I8},
    {DType::kU8, ddo::v1::DTYPE_U8},           {DType::kBool, ddo::v1::DTYPE_BOOL},
    {DType::kU16, ddo::v1::DTYPE_U16},         {DType::kU32, ddo::v1::DTYPE_U32},
    {DType::kU64, ddo::v1::DTYPE_U64},
};

}  // namespace

absl::StatusOr<DType> DTypeFromProto(ddo::v1::DType dtype) {
  for (const auto& [plain, proto] : kProtoDTypes) {
    if (dtype == proto) return plain;
  }
  if (dtype == ddo::v1::DTYPE_UNSPECIFIED) {
    return absl::InvalidArgumentError("dtype is not set (DTYPE_UNSPECIFIED)");
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown dtype value ", static_cast<int>(dtype)));
}

ddo::v1::DType ToProto(DType dtype) {
  for (const auto& [plain, proto] : kProtoDTypes) {
    if (dtype == plain) return proto;
  }
  return ddo::v1::DTYPE_UNSPECIFIED;  // every DType is in the table (tensor_proto_test)
}

absl::StatusOr<std::vector<TensorEntry>> TensorTableFromProto(
    const google::protobuf::RepeatedPtrField<ddo::v1::TensorSpec>& specs) {
  std::vector<TensorEntry> tensors;
  tensors.reserve(specs.size());
  for (const ddo::v1::TensorSpec& spec : specs) {
    TensorEntry entry;
    entry.name = spec.name();
    absl::StatusOr<DType> dtype = DTypeFromProto(spec.dtype());
    if (!dtype.ok()) {
      const std::string tensor = spec.name().empty() ? absl::StrCat("#", tensors.size())
                                                     : absl::StrCat("'", spec.name(), "'");
      return absl::InvalidArgumentError(
          absl::StrCat("tensor ", tensor, ": ", dtype.status().message()));
    }
    entry.dtype = *dtype;
    entry.shape.assign(spec.shape().begin(), spec.shape().end());
    entry.byte_size = spec.byte_size();
    entry.module_path = spec.module_path();
    entry.module_class = spec.module_class();
    entry.unit = spec.unit();
    entry.is_buffer = spec.is_buffer();
    tensors.push_back(std::move(entry));
  }
  DDO_RETURN_IF_ERROR(ValidateTensorTable(tensors));
  return tensors;
}

void ToProto(const TensorEntry& tensor, ddo::v1::TensorSpec* spec) {
  spec->set_name(tensor.name);
  spec->set_dtype(ToProto(tensor.dtype));
  for (int64_t dim : tensor.shape) spec->add_shape(dim);
  spec->set_byte_size(tensor.byte_size);
  spec->set_module_path(tensor.module_path);
  spec->set_module_class(tensor.module_class);
  spec->set_unit(tensor.unit);
  spec->set_is_buffer(tensor.is_buffer);
}

}  // namespace ddo
