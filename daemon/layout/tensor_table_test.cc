// File: daemon/layout/tensor_table_test.cc
#include "daemon/layout/tensor_table.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "re2/re2.h"

namespace ddo {
namespace {

using ::testing::HasSubstr;

TensorEntry Spec(const std::string& name, std::vector<int64_t> shape, uint32_t unit,
                 DType dtype = DType::kBF16) {
  TensorEntry entry;
  entry.name = name;
  entry.dtype = dtype;
  uint64_t elements = 1;
  for (int64_t dim : shape) elements *= static_cast<uint64_t>(dim);
  entry.shape = std::move(shape);
  entry.byte_size = elements * DTypeSize(dtype);
  entry.unit = unit;
  return entry;
}

// A table that ValidateTensorTable accepts.
std::vector<TensorEntry> Table(std::vector<TensorEntry> tensors) {
  EXPECT_TRUE(ValidateTensorTable(tensors).ok());
  return tensors;
}

TEST(TensorTableTest, RejectsBadTablesNamingTheTensor) {
  auto expect_error = [](std::vector<TensorEntry> tensors, const std::string& words) {
    absl::Status status = ValidateTensorTable(tensors);
    EXPECT_TRUE(absl::IsInvalidArgument(status)) << words;
    EXPECT_THAT(std::string(status.message()), HasSubstr(words));
  };
  expect_error({}, "empty");
  expect_error({Spec("x", {2}, 0), Spec("x", {2}, 1)}, "'x' appears twice");
  expect_error({Spec("", {2}, 0)}, "#0 of the table has no name");
  auto wrong_size = Spec("w", {2, 2}, 0);
  wrong_size.byte_size = 7;
  expect_error({wrong_size}, "'w': byte_size 7");
  // 2^64 - 1 bytes: a valid shape whose size would overflow every offset after it.
  auto enormous = Spec("huge", {4294967295, 4294967297}, 0, DType::kU8);
  enormous.byte_size = UINT64_MAX;
  expect_error({enormous}, "'huge' takes the table past");
  auto negative = Spec("n", {2}, 0);
  negative.shape[0] = -2;
  expect_error({negative}, "'n'");
}

TEST(TensorTableTest, UnitsAreContiguousInOrderOfFirstAppearance) {
  auto tensors = Table({Spec("b0.q", {100}, 1), Spec("b1.q", {100}, 2), Spec("b0.k", {100}, 1),
                        Spec("b1.k", {100}, 2)});
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

TEST(TensorTableTest, OnAGridNoTensorThatFitsACellCrossesALine) {
  // bf16 tensors of 3000, 1500 and 5000 bytes on a 4096-byte grid: the one of 5000 is larger
  // than a cell and starts where it falls; the others move past the line they would cross.
  std::vector<TensorEntry> tensors;
  for (int i = 0; i < 12; ++i) {
    tensors.push_back(Spec("t" + std::to_string(i), {i % 3 == 0 ? 1500 : i % 3 == 1 ? 750 : 2500},
                           static_cast<uint32_t>(i / 4)));
  }
  tensors = Table(tensors);
  std::vector<TensorEntry> plain = tensors;
  const uint64_t plain_span = LayOut(plain);
  EXPECT_EQ(LayOutOnGrid(tensors, 0), plain_span) << "no grid: LayOut";
  constexpr uint64_t kGrid = 4096;
  const uint64_t span = LayOutOnGrid(tensors, kGrid);
  EXPECT_GE(span, plain_span);
  uint64_t previous_end = 0;
  for (const TensorEntry& tensor : tensors) {
    EXPECT_EQ(tensor.offset % kTensorAlignment, 0u);
    EXPECT_GE(tensor.offset, previous_end) << tensor.name << " overlaps the one before";
    previous_end = tensor.offset + tensor.byte_size;
    if (tensor.byte_size <= kGrid) {
      EXPECT_EQ(tensor.offset / kGrid, (previous_end - 1) / kGrid) << tensor.name << " crosses";
    }
    EXPECT_LE(previous_end, span);
  }
  // Units stay contiguous and in order, as LayOut has them.
  for (size_t i = 1; i < tensors.size(); ++i) {
    EXPECT_GT(tensors[i].offset, tensors[i - 1].offset);
  }
}

TEST(TensorTableTest, StructureHashSeesNamesShapesDtypesAndUnits) {
  auto base = Table({Spec("a", {2, 3}, 0)});
  const std::string hash = StructureHash(base);
  // RE2, not MatchesRegex: gtest's own regex on Windows has no brackets or counts.
  EXPECT_TRUE(RE2::FullMatch(hash, "xxh3-64:[0-9a-f]{16}")) << hash;
  EXPECT_EQ(hash, StructureHash(Table({Spec("a", {2, 3}, 0)})));
  EXPECT_NE(hash, StructureHash(Table({Spec("b", {2, 3}, 0)})));
  EXPECT_NE(hash, StructureHash(Table({Spec("a", {3, 2}, 0)})));
  EXPECT_NE(hash, StructureHash(Table({Spec("a", {2, 3}, 1)})));
  EXPECT_NE(hash, StructureHash(Table({Spec("a", {2, 3}, 0, DType::kF32)})));
}

TEST(TensorTableTest, ContentHashFollowsTheBytes) {
  auto tensors = Table({Spec("a", {4}, 0), Spec("b", {4}, 1)});
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
