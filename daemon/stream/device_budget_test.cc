#include "daemon/stream/device_budget.h"

#include <gtest/gtest.h>

#include "daemon/pool/host_pool.h"

namespace ddo {
namespace {

TEST(DeviceBudgetTest, AReservationGivesItsBytesBackWhenItGoes) {
  DeviceBudget budget;
  {
    std::optional<DeviceBudget::Reservation> held = budget.TryReserve("gpu", 100, 60);
    ASSERT_TRUE(held.has_value());
    EXPECT_EQ(held->bytes(), 60u);
    EXPECT_EQ(budget.reserved("gpu"), 60u);
    EXPECT_FALSE(budget.TryReserve("gpu", 100, 41).has_value()) << "over the limit";
    EXPECT_EQ(budget.reserved("gpu"), 60u) << "a refusal reserves nothing";
    EXPECT_TRUE(budget.TryReserve("other", 100, 100).has_value()) << "devices are apart";
  }
  EXPECT_EQ(budget.reserved("gpu"), 0u);
  EXPECT_EQ(budget.reserved("other"), 0u);
}

TEST(DeviceBudgetTest, NoLimitAndLimitsAtTheEdge) {
  DeviceBudget budget;
  auto unlimited = budget.TryReserve("cpu", 0, UINT64_MAX / 2);
  EXPECT_TRUE(unlimited.has_value());
  auto exact = budget.TryReserve("gpu", 10, 10);
  EXPECT_TRUE(exact.has_value());
  EXPECT_FALSE(budget.TryReserve("gpu", 10, 1).has_value());
  EXPECT_FALSE(budget.TryReserve("gpu2", 10, 11).has_value());
  EXPECT_FALSE(budget.TryReserve("gpu3", 10, UINT64_MAX).has_value()) << "no overflow";
}

TEST(DeviceBudgetTest, MovedSplitMergedAndReleasedReservationsCountOnce) {
  DeviceBudget budget;
  std::optional<DeviceBudget::Reservation> session = budget.TryReserve("gpu", 0, 100);
  ASSERT_TRUE(session.has_value());
  DeviceBudget::Reservation moved = std::move(*session);
  EXPECT_EQ(session->bytes(), 0u);
  EXPECT_EQ(budget.reserved("gpu"), 100u);

  // A closing session keeps its slab's share warm and gives its ring's back.
  DeviceBudget::Reservation slab = moved.Split(30);
  EXPECT_EQ(slab.bytes(), 30u);
  EXPECT_EQ(moved.bytes(), 70u);
  moved.Release();
  moved.Release();  // idempotent
  EXPECT_EQ(budget.reserved("gpu"), 30u);

  // The next session takes the warm slab's bytes and reserves its ring.
  std::optional<DeviceBudget::Reservation> ring = budget.TryReserve("gpu", 0, 70);
  ASSERT_TRUE(ring.has_value());
  DeviceBudget::Reservation next;
  next.Merge(std::move(slab));
  next.Merge(std::move(*ring));
  EXPECT_EQ(next.bytes(), 100u);
  EXPECT_EQ(budget.reserved("gpu"), 100u);
  next = DeviceBudget::Reservation();  // assignment releases what it held
  EXPECT_EQ(budget.reserved("gpu"), 0u);
  DeviceBudget::Reservation too_much = next.Split(5);
  EXPECT_EQ(too_much.bytes(), 0u) << "a split takes at most what is held";
}

TEST(DeviceBudgetTest, AHostDevicesBytesAreCountedInThePoolsBudgetToo) {
  PoolOptions options;
  options.budget_bytes = 100;
  HostPool ram(options);
  DeviceBudget budget;
  {
    std::optional<DeviceBudget::Reservation> session = budget.TryReserve("cpu", 0, 60, &ram);
    ASSERT_TRUE(session.has_value());
    EXPECT_EQ(ram.Usage().held_bytes, 60u);
    EXPECT_EQ(ram.Usage().reserved_bytes, 60u);
    EXPECT_FALSE(ram.Fits(41)) << "the pool sees the session's bytes";
    EXPECT_FALSE(budget.TryReserve("cpu", 0, 41, &ram).has_value()) << "the pool is the limit";
    EXPECT_EQ(budget.reserved("cpu"), 60u) << "a refusal reserves nothing";
    EXPECT_EQ(ram.Usage().held_bytes, 60u);
    // Split and merged shares stay one count in the pool.
    DeviceBudget::Reservation warm = session->Split(20);
    EXPECT_EQ(ram.Usage().held_bytes, 60u);
    warm.Release();
    EXPECT_EQ(ram.Usage().held_bytes, 40u);
    EXPECT_EQ(budget.reserved("cpu"), 40u);
    EXPECT_TRUE(budget.TryReserve("gpu", 0, 1000).has_value()) << "a GPU's bytes are not RAM";
    EXPECT_EQ(ram.Usage().held_bytes, 40u);
  }
  EXPECT_EQ(ram.Usage().held_bytes, 0u);
  EXPECT_EQ(ram.Usage().reserved_bytes, 0u);
  EXPECT_EQ(budget.reserved("cpu"), 0u);
}

}  // namespace
}  // namespace ddo
