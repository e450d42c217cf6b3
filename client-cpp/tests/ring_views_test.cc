// File: client-cpp/tests/ring_views_test.cc
//
// RingViews over a host ring of known bytes: views are zero-copy windows of the ring with the
// tensor's dtype, shape and contiguous strides, cached per placement, and refused (with
// Python's texts) where ddod's placement or a tensor's offset is wrong.
#include "client-cpp/src/consumer/ring_views.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "ddo/status.h"

namespace ddo::consumer {
namespace {

constexpr uint64_t kRingBytes = 64 * 1024;

class RingViewsTest : public ::testing::Test {
 protected:
  RingViewsTest() : bytes_(kRingBytes) {
    for (size_t i = 0; i < bytes_.size(); ++i) bytes_[i] = static_cast<uint8_t>(i * 7 + 3);
    ring_ = RingTensor(bytes_.data(), bytes_.size(), at::kCPU, [](void*) {});
  }

  // Unit 0: one float32 (4, 8) weight; unit 1: a bfloat16 (16) bias and an int64 (2, 3) table.
  static std::vector<UnitLayout> Layouts() {
    return {
        {{"w", 0, 128, at::kFloat, {4, 8}}},
        {{"b", 0, 32, at::kBFloat16, {16}}, {"t", 256, 48, at::kLong, {2, 3}}},
    };
  }

  // True when `view` is exactly the ring's bytes at `offset`, read in place.
  bool IsRingAt(const at::Tensor& view, uint64_t offset) const {
    const auto* data = static_cast<const uint8_t*>(view.data_ptr());
    return data == bytes_.data() + offset &&
           std::memcmp(data, bytes_.data() + offset, view.numel() * view.element_size()) == 0;
  }

  std::vector<uint8_t> bytes_;
  at::Tensor ring_;
};

TEST_F(RingViewsTest, ViewsAreTheRingsBytesWithTheTensorsDtypeAndShape) {
  RingViews views(ring_, Layouts());
  EXPECT_EQ(views.unit_count(), 2u);
  EXPECT_EQ(views.spans(), (std::vector<uint64_t>{128, 304}));

  const UnitViews& linear = views.Views(0, 512);
  ASSERT_EQ(linear.size(), 1u);
  EXPECT_EQ(linear[0].scalar_type(), at::kFloat);
  EXPECT_EQ(linear[0].sizes().vec(), (std::vector<int64_t>{4, 8}));
  EXPECT_EQ(linear[0].strides().vec(), (std::vector<int64_t>{8, 1}));
  EXPECT_TRUE(IsRingAt(linear[0], 512));
  float expected[32];
  std::memcpy(expected, bytes_.data() + 512, sizeof(expected));
  EXPECT_TRUE(at::equal(linear[0].contiguous().view(at::kInt),
                        at::from_blob(expected, {4, 8}, at::kFloat).view(at::kInt)));

  const UnitViews& block = views.Views(1, 1024);
  ASSERT_EQ(block.size(), 2u);
  EXPECT_EQ(block[0].scalar_type(), at::kBFloat16);
  EXPECT_EQ(block[0].sizes().vec(), (std::vector<int64_t>{16}));
  EXPECT_TRUE(IsRingAt(block[0], 1024));
  EXPECT_EQ(block[1].scalar_type(), at::kLong);
  EXPECT_EQ(block[1].strides().vec(), (std::vector<int64_t>{3, 1}));
  EXPECT_TRUE(IsRingAt(block[1], 1024 + 256));
  int64_t first;
  std::memcpy(&first, bytes_.data() + 1024 + 256, sizeof(first));
  EXPECT_EQ(block[1][0][0].item<int64_t>(), first);
}

TEST_F(RingViewsTest, ViewsAreZeroCopy) {
  RingViews views(ring_, Layouts());
  const at::Tensor weight = views.Views(0, 0)[0];
  const float value = 1.5f;
  std::memcpy(bytes_.data() + 4, &value, sizeof(value));  // ddod refills the slot
  EXPECT_EQ(weight[0][1].item<float>(), 1.5f);
}

TEST_F(RingViewsTest, APlacementSeenBeforeReusesItsViews) {
  RingViews views(ring_, Layouts());
  const UnitViews* first = &views.Views(0, 256);
  const void* data = (*first)[0].data_ptr();
  views.Views(0, 768);
  views.Views(1, 256);
  EXPECT_EQ(views.cached(), 3u);
  const UnitViews& again = views.Views(0, 256);
  EXPECT_EQ(&again, first);
  EXPECT_EQ(again[0].data_ptr(), data);
  EXPECT_EQ(views.cached(), 3u);
}

TEST_F(RingViewsTest, TheCacheIsClearedWhenFull) {
  RingViews views(ring_, Layouts(), /*max_cached=*/2);
  views.Views(0, 0);
  views.Views(0, 256);
  EXPECT_EQ(views.cached(), 2u);
  EXPECT_TRUE(IsRingAt(views.Views(0, 512)[0], 512));
  EXPECT_EQ(views.cached(), 1u);
}

TEST_F(RingViewsTest, AMisplacedUnitIsRefused) {
  RingViews views(ring_, Layouts());
  try {
    views.Views(0, 100);
    FAIL() << "no exception";
  } catch (const StreamingError& error) {
    EXPECT_STREQ(error.what(),
                 "ddod placed unit 0 at bytes [100, 228) of a 65536-byte ring (units lie at "
                 "multiples of 256 bytes)");
  }
  try {
    views.Views(1, kRingBytes - 256);
    FAIL() << "no exception";
  } catch (const StreamingError& error) {
    EXPECT_STREQ(error.what(),
                 "ddod placed unit 1 at bytes [65280, 65584) of a 65536-byte ring (units lie at "
                 "multiples of 256 bytes)");
  }
  EXPECT_EQ(views.cached(), 0u);
  EXPECT_TRUE(IsRingAt(views.Views(1, kRingBytes - 512)[1], kRingBytes - 256));  // fits
}

TEST_F(RingViewsTest, ATensorOffsetOffItsElementSizeIsRefused) {
  try {
    RingViews views(ring_, {{{"w", 2, 16, at::kFloat, {4}}}});
    FAIL() << "no exception";
  } catch (const StreamingError& error) {
    EXPECT_STREQ(error.what(),
                 "'w' lies at offset 2 of its unit, not aligned to its 4-byte elements");
  }
}

}  // namespace
}  // namespace ddo::consumer
