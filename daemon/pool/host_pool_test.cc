#include "daemon/pool/host_pool.h"

#include <sys/mman.h>
#include <sys/stat.h>

#include <cstring>
#include <filesystem>

#include "daemon/common/random_id.h"
#include "daemon/pool/host_pinning.h"
#include "daemon/session/lease_registry.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ddo {
namespace {

using ::testing::HasSubstr;

PoolOptions Options(uint64_t budget) {
  PoolOptions options;
  options.budget_bytes = budget;
  options.name_namespace = PoolNamespace("/tmp/host-pool-test-" + RandomId());
  return options;
}

TEST(HostPoolTest, SegmentsAreOwnerOnlyRoundedAndCounted) {
  HostPool pool(Options(16ull << 20));
  auto segment = pool.Allocate(3 << 20);
  ASSERT_TRUE(segment.ok()) << segment.status();
  EXPECT_EQ((*segment)->size(), 4u << 20) << "rounded up to 2 MiB";
  EXPECT_THAT((*segment)->name(), ::testing::StartsWith(pool.name_prefix()));
  struct stat info {};
  ASSERT_EQ(::stat(SegmentPath((*segment)->name()).c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0600u);
  EXPECT_EQ(pool.Usage().reserved_bytes, 4u << 20);
  EXPECT_EQ(pool.Usage().segments, 1u);
  EXPECT_FALSE((*segment)->pinned()) << "the host backend never pins";
  (*segment)->MarkDiscarded();
  const std::string path = SegmentPath((*segment)->name());
  segment->reset();
  EXPECT_EQ(pool.Usage().reserved_bytes, 0u);
  EXPECT_FALSE(std::filesystem::exists(path)) << "a discarded segment leaves /dev/shm";
}

TEST(HostPoolTest, TheBudgetIsEnforcedWithSizesInTheMessage) {
  HostPool pool(Options(4ull << 20));
  auto first = pool.Allocate(2 << 20);
  ASSERT_TRUE(first.ok());
  auto second = pool.Allocate(3 << 20);
  ASSERT_FALSE(second.ok());
  EXPECT_TRUE(absl::IsResourceExhausted(second.status()));
  EXPECT_THAT(std::string(second.status().message()), HasSubstr("budget 4.0 MiB"));
  EXPECT_FALSE(pool.Fits(3 << 20));
  EXPECT_TRUE(pool.Fits(2 << 20));
  (*first)->MarkDiscarded();
}

TEST(HostPoolTest, KeptSegmentsSurviveAndAreAdoptedByTheNextPool) {
  const PoolOptions options = Options(16ull << 20);
  std::string name;
  {
    HostPool pool(options);
    auto segment = pool.Allocate(1 << 20);
    ASSERT_TRUE(segment.ok());
    std::memcpy((*segment)->data(), "warm bytes", 11);
    name = (*segment)->name();
    // Not discarded: this is a ddod going away, keeping the pool warm.
  }
  HostPool next(options);
  EXPECT_THAT(next.ListSegmentNames(), ::testing::Contains(name));
  auto adopted = next.Adopt(name);
  ASSERT_TRUE(adopted.ok()) << adopted.status();
  EXPECT_STREQ((*adopted)->data(), "warm bytes");
  EXPECT_EQ(next.Usage().reserved_bytes, 2u << 20);
  (*adopted)->MarkDiscarded();
}

TEST(HostPoolTest, TwoPoolsNeverShareNames) {
  HostPool a(Options(4 << 20));
  HostPool b(Options(4 << 20));
  EXPECT_NE(a.name_prefix(), b.name_prefix());
}

}  // namespace
}  // namespace ddo

namespace ddo {
namespace {

// Runs everywhere: on the GPU machine it pins for real, elsewhere it checks the refusal.
TEST(HostPoolTest, PinningFollowsTheMachine) {
  PoolOptions options = Options(8ull << 20);
  options.pin = true;
  HostPool pool(options);
  auto segment = pool.Allocate(3 << 20);
  ASSERT_TRUE(segment.ok()) << segment.status();
  (*segment)->MarkDiscarded();
  const absl::Status pinned = (*segment)->Pin();
  if (!HostPinningAvailable()) {
    EXPECT_FALSE(pinned.ok());
    EXPECT_FALSE((*segment)->pinned());
    EXPECT_EQ(pool.Usage().pinned_bytes, 0u);
    return;
  }
  ASSERT_TRUE(pinned.ok()) << pinned;
  EXPECT_TRUE((*segment)->pinned());
  EXPECT_EQ(pool.Usage().pinned_bytes, 4u << 20);
  EXPECT_TRUE((*segment)->Pin().ok()) << "idempotent";
  segment->reset();
  EXPECT_EQ(pool.Usage().pinned_bytes, 0u);
}

}  // namespace
}  // namespace ddo
