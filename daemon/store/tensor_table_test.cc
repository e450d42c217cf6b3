#include "daemon/store/tensor_table.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ddo {
namespace {

using ::testing::HasSubstr;

ddo::v1::TensorSpec Spec(const std::string& name, std::vector<int64_t> shape, uint32_t unit,
                         ddo::v1::DType dtype = ddo::v1::DTYPE_BF16) {
  ddo::v1::TensorSpec spec;
  spec.set_name(name);
  spec.set_dtype(dtype);
  uint64_t elements = 1;
  for (int64_t dim : shape) {
    spec.add_shape(dim);
    elements *= static_cast<uint64_t>(dim);
  }
  spec.set_byte_size(elements * (dtype == ddo::v1::DTYPE_F32 ? 4 : 2));
  spec.set_unit(unit);
  return spec;
}

google::protobuf::RepeatedPtrField<ddo::v1::TensorSpec> Table(
    std::vector<ddo::v1::TensorSpec> specs) {
  google::protobuf::RepeatedPtrField<ddo::v1::TensorSpec> table;
  for (auto& spec : specs) *table.Add() = std::move(spec);
  return table;
}

TEST(TensorTableTest, ValidTableRoundTrips) {
  auto tensors = TensorTableFromProto(Table({Spec("a.weight", {4, 8}, 0), Spec("a.bias", {4}, 0)}));
  ASSERT_TRUE(tensors.ok()) << tensors.status();
  EXPECT_EQ((*tensors)[0].byte_size, 64u);
  ddo::v1::TensorSpec back;
  ToProto((*tensors)[0], &back);
  EXPECT_EQ(back.name(), "a.weight");
  EXPECT_EQ(back.dtype(), ddo::v1::DTYPE_BF16);
  EXPECT_EQ(back.byte_size(), 64u);
}

TEST(TensorTableTest, RejectsBadTablesNamingTheTensor) {
  auto expect_error = [](std::vector<ddo::v1::TensorSpec> specs, const std::string& words) {
    auto tensors = TensorTableFromProto(Table(std::move(specs)));
    ASSERT_FALSE(tensors.ok());
    EXPECT_TRUE(absl::IsInvalidArgument(tensors.status()));
    EXPECT_THAT(std::string(tensors.status().message()), HasSubstr(words));
  };
  expect_error({}, "empty");
  expect_error({Spec("x", {2}, 0), Spec("x", {2}, 1)}, "'x' appears twice");
  expect_error({Spec("", {2}, 0)}, "no name");
  auto wrong_size = Spec("w", {2, 2}, 0);
  wrong_size.set_byte_size(7);
  expect_error({wrong_size}, "'w': byte_size 7");
  auto no_dtype = Spec("d", {2}, 0);
  no_dtype.set_dtype(ddo::v1::DTYPE_UNSPECIFIED);
  expect_error({no_dtype}, "'d'");
  // 2^64 - 1 bytes: a valid shape whose size would overflow every offset after it.
  auto enormous = Spec("huge", {4294967295, 4294967297}, 0, ddo::v1::DTYPE_U8);
  enormous.set_byte_size(UINT64_MAX);
  expect_error({enormous}, "'huge' takes the table past");
  auto negative = Spec("n", {2}, 0);
  negative.set_shape(0, -2);
  expect_error({negative}, "'n'");
}

TEST(TensorTableTest, UnitsAreContiguousInOrderOfFirstAppearance) {
  auto tensors = *TensorTableFromProto(Table({Spec("b0.q", {100}, 1), Spec("b1.q", {100}, 2),
                                              Spec("b0.k", {100}, 1), Spec("b1.k", {100}, 2)}));
  const uint64_t span = LayOut(tensors);
  // Unit 1 (b0.q, b0.k) first, then unit 2 on a 4 KiB boundary.
  EXPECT_EQ(tensors[0].offset, 0u);
  EXPECT_EQ(tensors[2].offset, 256u);
  EXPECT_EQ(tensors[1].offset, 4096u);
  EXPECT_EQ(tensors[3].offset, 4096u + 256u);
  EXPECT_EQ(span, 4096u + 256u + 200u);
  for (const auto& tensor : tensors) {
    EXPECT_EQ(tensor.offset % kTensorAlignment, 0u);
  }
  EXPECT_EQ(CountUnits(tensors), 2u);
  EXPECT_EQ(TotalTensorBytes(tensors), 800u);
}

TEST(TensorTableTest, StructureHashSeesNamesShapesDtypesAndUnits) {
  auto base = *TensorTableFromProto(Table({Spec("a", {2, 3}, 0)}));
  const std::string hash = StructureHash(base);
  EXPECT_THAT(hash, ::testing::MatchesRegex("xxh3-64:[0-9a-f]{16}"));
  EXPECT_EQ(hash, StructureHash(*TensorTableFromProto(Table({Spec("a", {2, 3}, 0)}))));
  EXPECT_NE(hash, StructureHash(*TensorTableFromProto(Table({Spec("b", {2, 3}, 0)}))));
  EXPECT_NE(hash, StructureHash(*TensorTableFromProto(Table({Spec("a", {3, 2}, 0)}))));
  EXPECT_NE(hash, StructureHash(*TensorTableFromProto(Table({Spec("a", {2, 3}, 1)}))));
  EXPECT_NE(hash, StructureHash(*TensorTableFromProto(
                      Table({Spec("a", {2, 3}, 0, ddo::v1::DTYPE_F32)}))));
}

TEST(TensorTableTest, ContentHashFollowsTheBytes) {
  auto tensors = *TensorTableFromProto(Table({Spec("a", {4}, 0), Spec("b", {4}, 1)}));
  const uint64_t span = LayOut(tensors);
  std::vector<char> bytes(span, 1);
  const std::string before = ContentHash(tensors, bytes.data());
  bytes[tensors[1].offset + 3] = 2;
  EXPECT_NE(ContentHash(tensors, bytes.data()), before);
  // Padding between tensors is not content.
  bytes[tensors[1].offset + 3] = 1;
  bytes[tensors[0].offset + tensors[0].byte_size + 1] = 9;
  EXPECT_EQ(ContentHash(tensors, bytes.data()), before);
}

}  // namespace
}  // namespace ddo
