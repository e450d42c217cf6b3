#include "daemon/platform/gpu_inventory.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ddo {
namespace {

using ::testing::MatchesRegex;

TEST(GpuInventoryTest, FormatsUuidsLikeNvidiaSmi) {
  const unsigned char bytes[16] = {0x5a, 0x1b, 0x2c, 0x3d, 0x4e, 0x5f, 0x60, 0x71,
                                   0x82, 0x93, 0xa4, 0xb5, 0xc6, 0xd7, 0xe8, 0xf9};
  EXPECT_EQ(FormatGpuUuid(bytes), "GPU-5a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9");
}

// Runs on every machine: without a GPU (CI) the probe must pick the host backend and say why;
// with one (the device machine) every device must carry a well-formed UUID and its size.
TEST(GpuInventoryTest, ProbeIsConsistentOnThisMachine) {
  const GpuInventory inventory = ProbeGpus();
  EXPECT_FALSE(inventory.detail.empty());
  if (inventory.backend == ComputeBackend::kHost) {
    EXPECT_TRUE(inventory.devices.empty());
    EXPECT_FALSE(QueryFreeBytes(0).ok());
    return;
  }
  ASSERT_FALSE(inventory.devices.empty());
  for (const GpuDevice& device : inventory.devices) {
    EXPECT_THAT(device.uuid, MatchesRegex("GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-"
                                          "[0-9a-f]{12}"));
    EXPECT_GT(device.total_bytes, 0u);
    auto free_bytes = QueryFreeBytes(device.ordinal);
    ASSERT_TRUE(free_bytes.ok()) << free_bytes.status();
    EXPECT_GT(*free_bytes, 0u);
    EXPECT_LE(*free_bytes, device.total_bytes);
  }
}

}  // namespace
}  // namespace ddo
