// File: daemon/service/tensor_proto_test.cc
#include "daemon/service/tensor_proto.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ddo {
namespace {

using ::testing::HasSubstr;

ddo::v1::TensorSpec Spec(const std::string& name, std::vector<int64_t> shape,
                         ddo::v1::DType dtype = ddo::v1::DTYPE_BF16) {
  ddo::v1::TensorSpec spec;
  spec.set_name(name);
  spec.set_dtype(dtype);
  uint64_t elements = 1;
  for (int64_t dim : shape) {
    spec.add_shape(dim);
    elements *= static_cast<uint64_t>(dim);
  }
  spec.set_byte_size(elements * 2);
  spec.set_module_path("a");
  spec.set_module_class("Linear");
  spec.set_unit(3);
  return spec;
}

google::protobuf::RepeatedPtrField<ddo::v1::TensorSpec> Table(
    std::vector<ddo::v1::TensorSpec> specs) {
  google::protobuf::RepeatedPtrField<ddo::v1::TensorSpec> table;
  for (auto& spec : specs) *table.Add() = std::move(spec);
  return table;
}

TEST(TensorProtoTest, EveryDTypeRoundTrips) {
  // Every value of the enum, the last one included (dtype.h lists them in order).
  for (int value = 0; value <= static_cast<int>(DType::kU64); ++value) {
    const DType dtype = static_cast<DType>(value);
    ASSERT_NE(ToProto(dtype), ddo::v1::DTYPE_UNSPECIFIED) << SafetensorsDTypeName(dtype);
    auto back = DTypeFromProto(ToProto(dtype));
    ASSERT_TRUE(back.ok()) << SafetensorsDTypeName(dtype);
    EXPECT_EQ(*back, dtype);
  }
  EXPECT_EQ(ToProto(DType::kF64), ddo::v1::DTYPE_F64);
  EXPECT_EQ(ToProto(DType::kBF16), ddo::v1::DTYPE_BF16);
  EXPECT_EQ(ToProto(DType::kF8E5M2), ddo::v1::DTYPE_F8_E5M2);
  EXPECT_EQ(ToProto(DType::kBool), ddo::v1::DTYPE_BOOL);
  EXPECT_EQ(ToProto(DType::kU64), ddo::v1::DTYPE_U64);
}

TEST(TensorProtoTest, UnspecifiedAndUnknownProtoValuesAreRejected) {
  auto unspecified = DTypeFromProto(ddo::v1::DTYPE_UNSPECIFIED);
  EXPECT_TRUE(absl::IsInvalidArgument(unspecified.status()));
  auto unknown = DTypeFromProto(static_cast<ddo::v1::DType>(99));
  EXPECT_TRUE(absl::IsInvalidArgument(unknown.status()));
  EXPECT_THAT(std::string(unknown.status().message()), HasSubstr("99"));
}

TEST(TensorProtoTest, ValidTableRoundTrips) {
  auto tensors = TensorTableFromProto(Table({Spec("a.weight", {4, 8}), Spec("a.bias", {4})}));
  ASSERT_TRUE(tensors.ok()) << tensors.status();
  EXPECT_EQ((*tensors)[0].byte_size, 64u);
  EXPECT_EQ((*tensors)[0].module_class, "Linear");
  EXPECT_EQ((*tensors)[0].unit, 3u);
  ddo::v1::TensorSpec back;
  ToProto((*tensors)[0], &back);
  EXPECT_EQ(back.SerializeAsString(), Spec("a.weight", {4, 8}).SerializeAsString());
}

TEST(TensorProtoTest, BadDtypesAndTablesAreNamed) {
  auto error_of = [](std::vector<ddo::v1::TensorSpec> specs) {
    absl::StatusOr<std::vector<TensorEntry>> tensors = TensorTableFromProto(Table(std::move(specs)));
    EXPECT_TRUE(absl::IsInvalidArgument(tensors.status()));
    return std::string(tensors.status().message());
  };
  EXPECT_THAT(error_of({Spec("d", {2}, ddo::v1::DTYPE_UNSPECIFIED)}), HasSubstr("tensor 'd': dtype is not set"));
  EXPECT_THAT(error_of({Spec("", {2}, static_cast<ddo::v1::DType>(77))}), HasSubstr("tensor #0: unknown dtype value 77"));
  // The store's rules apply after the conversion.
  EXPECT_THAT(error_of({}), HasSubstr("empty"));
  EXPECT_THAT(error_of({Spec("x", {2}), Spec("x", {2})}), HasSubstr("'x' appears twice"));
}

}  // namespace
}  // namespace ddo
