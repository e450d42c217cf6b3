#include "daemon/stream/warm_slab_cache.h"

#include <gtest/gtest.h>

#include "absl/time/clock.h"

namespace ddo {
namespace {

class WarmSlabCacheTest : public ::testing::Test {
 protected:
  WarmSlab Slab(const std::string& device, const std::string& key, uint64_t bytes,
                absl::Duration age, bool prefetched = false) {
    return WarmSlab{device, nullptr, *budget_.TryReserve(device, 0, bytes), now_ - age, key,
                    prefetched};
  }

  DeviceBudget budget_;
  WarmSlabCache cache_;
  const absl::Time now_ = absl::Now();
};

TEST_F(WarmSlabCacheTest, ASlabIsFoundOnlyUnderItsWholeKey) {
  const std::string key = WarmSlabCache::Key("gpu0", SlabBytesIdentity("c1", "seg1"), "sig");
  EXPECT_EQ(key, "gpu0|c1/seg1|sig");
  WarmSlab slab = Slab("gpu0", "model", 10, absl::Seconds(1));
  ASSERT_TRUE(cache_.Put(key, slab));
  EXPECT_FALSE(cache_.Take(WarmSlabCache::Key("gpu1", "c1/seg1", "sig")).has_value());
  EXPECT_FALSE(cache_.Take(WarmSlabCache::Key("gpu0", "c1/seg2", "sig")).has_value())
      << "the same key registered again has other bytes";
  std::optional<WarmSlab> taken = cache_.Take(key);
  ASSERT_TRUE(taken.has_value());
  EXPECT_EQ(taken->reservation.bytes(), 10u);
  EXPECT_EQ(cache_.size(), 0u);
}

TEST_F(WarmSlabCacheTest, ASecondSlabUnderOneKeyIsRefusedAndLeftToTheCaller) {
  WarmSlab first = Slab("gpu0", "a", 10, absl::Seconds(1));
  WarmSlab second = Slab("gpu0", "a", 20, absl::Seconds(1));
  ASSERT_TRUE(cache_.Put("k", first));
  EXPECT_FALSE(cache_.Put("k", second));
  EXPECT_EQ(second.reservation.bytes(), 20u) << "still the caller's";
  second.reservation.Release();
  EXPECT_EQ(budget_.reserved("gpu0"), 10u);
}

TEST_F(WarmSlabCacheTest, TheOldestOfADeviceGoesFirstAndPrefetchedOnesCanBeSpared) {
  WarmSlab old_slab = Slab("gpu0", "old", 1, absl::Minutes(10));
  WarmSlab prefetched = Slab("gpu0", "prefetched", 1, absl::Hours(1), /*prefetched=*/true);
  WarmSlab young = Slab("gpu0", "young", 1, absl::Seconds(1));
  WarmSlab elsewhere = Slab("gpu1", "elsewhere", 1, absl::Hours(2));
  cache_.Put("1", old_slab);
  cache_.Put("2", prefetched);
  cache_.Put("3", young);
  cache_.Put("4", elsewhere);
  EXPECT_EQ(cache_.TakeOldest("gpu0", /*spare_prefetched=*/true)->cache_key, "old");
  EXPECT_EQ(cache_.TakeOldest("gpu0", /*spare_prefetched=*/true)->cache_key, "young");
  EXPECT_FALSE(cache_.TakeOldest("gpu0", /*spare_prefetched=*/true).has_value());
  EXPECT_EQ(cache_.TakeOldest("gpu0", /*spare_prefetched=*/false)->cache_key, "prefetched");
  EXPECT_EQ(cache_.size(), 1u);
  EXPECT_EQ(budget_.reserved("gpu0"), 0u) << "taken slabs gave their bytes back";
  EXPECT_EQ(budget_.reserved("gpu1"), 1u);
}

TEST_F(WarmSlabCacheTest, TakeIfAndRecipes) {
  WarmSlab a = Slab("gpu0", "a", 1, absl::Seconds(1));
  WarmSlab b = Slab("gpu0", "b", 1, absl::Seconds(1));
  cache_.Put("a", a);
  cache_.Put("b", b);
  std::vector<WarmSlab> taken = cache_.TakeIf([](const WarmSlab& s) { return s.cache_key == "a"; });
  ASSERT_EQ(taken.size(), 1u);
  EXPECT_EQ(cache_.TakeAll().size(), 1u);

  EXPECT_FALSE(cache_.RecipeOf("model").has_value());
  cache_.Remember("model", SlabRecipe{"gpu0", 0, 100, "c1/seg1", "sig", {}, 42});
  cache_.Remember("model", SlabRecipe{"gpu1", 1, 100, "c1/seg1", "sig", {}, 43});
  ASSERT_TRUE(cache_.RecipeOf("model").has_value());
  EXPECT_EQ(cache_.RecipeOf("model")->device, "gpu1") << "the last session's";
}

}  // namespace
}  // namespace ddo
