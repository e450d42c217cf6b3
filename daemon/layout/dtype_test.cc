#include "daemon/layout/dtype.h"

#include <cstdint>
#include <limits>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ddo {
namespace {

using ::testing::HasSubstr;

constexpr DType kAll[] = {DType::kF64,    DType::kF32,  DType::kF16, DType::kBF16, DType::kF8E4M3,
                          DType::kF8E5M2, DType::kI64,  DType::kI32, DType::kI16,  DType::kI8,
                          DType::kU8,     DType::kBool, DType::kU16, DType::kU32,  DType::kU64};

TEST(DTypeTest, SafetensorsNamesAndSizes) {
  struct Expected {
    const char* name;
    DType dtype;
    size_t size;
  };
  const Expected expected[] = {
      {"F64", DType::kF64, 8},   {"F32", DType::kF32, 4},        {"F16", DType::kF16, 2},
      {"BF16", DType::kBF16, 2}, {"F8_E4M3", DType::kF8E4M3, 1}, {"F8_E5M2", DType::kF8E5M2, 1},
      {"I64", DType::kI64, 8},   {"I32", DType::kI32, 4},        {"I16", DType::kI16, 2},
      {"I8", DType::kI8, 1},     {"U8", DType::kU8, 1},          {"BOOL", DType::kBool, 1},
      {"U16", DType::kU16, 2},   {"U32", DType::kU32, 4},        {"U64", DType::kU64, 8},
  };
  for (const Expected& e : expected) {
    auto parsed = ParseSafetensorsDType(e.name);
    ASSERT_TRUE(parsed.ok()) << e.name << ": " << parsed.status();
    EXPECT_EQ(*parsed, e.dtype) << e.name;
    EXPECT_STREQ(SafetensorsDTypeName(e.dtype), e.name);
    EXPECT_EQ(DTypeSize(e.dtype), e.size) << e.name;
  }
}

TEST(DTypeTest, UnknownNamesListTheValidOnes) {
  for (const char* bad : {"", "bf16", "F8", "FLOAT32", "F8_E4M3FN", " F32"}) {
    auto parsed = ParseSafetensorsDType(bad);
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_TRUE(absl::IsInvalidArgument(parsed.status()));
    EXPECT_THAT(std::string(parsed.status().message()), HasSubstr("BF16, F8_E4M3, F8_E5M2"));
  }
}

TEST(DTypeTest, TensorByteSize) {
  EXPECT_EQ(*TensorByteSize(DType::kBF16, {2, 3}), 12u);
  EXPECT_EQ(*TensorByteSize(DType::kF32, {}), 4u);  // a scalar
  EXPECT_EQ(*TensorByteSize(DType::kF64, {0, 7}), 0u);
  EXPECT_EQ(*TensorByteSize(DType::kU8, {1 << 20, 1 << 10}), uint64_t{1} << 30);
  // A zero dimension makes the product zero whatever the others are.
  const int64_t huge = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(*TensorByteSize(DType::kF64, {huge, huge, 0}), 0u);
}

TEST(DTypeTest, TensorByteSizeRejectsNegativeDimensionsAndOverflow) {
  auto negative = TensorByteSize(DType::kF32, {4, -1});
  EXPECT_TRUE(absl::IsInvalidArgument(negative.status()));
  EXPECT_THAT(std::string(negative.status().message()), HasSubstr("negative"));
  // Negative wins over zero: the shape itself is malformed.
  EXPECT_FALSE(TensorByteSize(DType::kF32, {0, -1}).ok());

  const int64_t huge = std::numeric_limits<int64_t>::max();
  auto overflow = TensorByteSize(DType::kF32, {huge});  // fits elements, not bytes
  EXPECT_TRUE(absl::IsInvalidArgument(overflow.status()));
  EXPECT_THAT(std::string(overflow.status().message()), HasSubstr("too large"));
  EXPECT_FALSE(TensorByteSize(DType::kU8, {int64_t{1} << 32, int64_t{1} << 32}).ok());
  EXPECT_EQ(*TensorByteSize(DType::kU8, {int64_t{1} << 31, int64_t{1} << 32}), uint64_t{1} << 63);
}

}  // namespace
}  // namespace ddo
