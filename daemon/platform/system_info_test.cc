#include "daemon/platform/system_info.h"

#include "gtest/gtest.h"

namespace ddo {
namespace {

TEST(SystemInfoTest, ParsesMemInfo) {
  auto info = ParseMemInfo(
      "MemTotal:       16384000 kB\nMemFree:         1000 kB\nMemAvailable:    8192000 kB\n");
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->total_bytes, 16384000ull * 1024);
  EXPECT_EQ(info->available_bytes, 8192000ull * 1024);
}

TEST(SystemInfoTest, OldKernelsWithoutMemAvailable) {
  auto info = ParseMemInfo(
      "MemTotal: 1000 kB\nMemFree: 100 kB\nBuffers: 20 kB\nCached: 300 kB\nSwapCached: 9 kB\n");
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->available_bytes, 420ull * 1024);
}

TEST(SystemInfoTest, GarbageIsAnError) {
  EXPECT_FALSE(ParseMemInfo("").ok());
  EXPECT_FALSE(ParseMemInfo("MemFree: x kB\n").ok());
}

TEST(SystemInfoTest, DetectsWslLikeTheSeed) {
  EXPECT_EQ(DetectLinuxFlavor("5.15.153.1-microsoft-standard-WSL2", ""), OsFlavor::kWsl);
  EXPECT_EQ(DetectLinuxFlavor("4.4.0-19041-Microsoft", ""), OsFlavor::kWsl);
  EXPECT_EQ(DetectLinuxFlavor("6.1.0-18-amd64", "Linux version 6.1.0 (gcc) #1 SMP WSL"),
            OsFlavor::kWsl);
  EXPECT_EQ(DetectLinuxFlavor("6.1.0-18-amd64", "Linux version 6.1.0-18-amd64 (Debian)"),
            OsFlavor::kLinux);
}

TEST(SystemInfoTest, QueryReadsThisMachineAndHonoursTheOverride) {
  SystemInfo real = QuerySystemInfo(std::nullopt);
  EXPECT_GT(real.memory.total_bytes, 0u);
  EXPECT_GT(real.cpu_count, 0u);
  EXPECT_FALSE(real.os_release.empty());
  EXPECT_FALSE(real.available_overridden);
  EXPECT_LE(real.memory.available_bytes, real.memory.total_bytes);
#ifdef _WIN32
  EXPECT_EQ(real.os, OsFlavor::kWindows);
  EXPECT_FALSE(real.hostname.empty());
#else
  EXPECT_NE(real.os, OsFlavor::kWindows);
#endif

  SystemInfo overridden = QuerySystemInfo(3.0);
  EXPECT_EQ(overridden.memory.available_bytes, 3ull << 30);
  EXPECT_TRUE(overridden.available_overridden);
}

}  // namespace
}  // namespace ddo
