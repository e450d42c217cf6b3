#include "daemon/session/lease_registry.h"

#include <set>
#include <thread>

#include "gtest/gtest.h"

namespace ddo {
namespace {

TEST(LeaseRegistryTest, OpenListClose) {
  LeaseRegistry leases;
  auto a = leases.Open(100, "runner a");
  auto b = leases.Open(200, "runner b");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(a->id, b->id);
  EXPECT_EQ(a->id.size(), 32u);
  EXPECT_EQ(leases.size(), 2u);
  leases.Close(a->id);
  leases.Close("unknown");
  ASSERT_EQ(leases.List().size(), 1u);
  EXPECT_EQ(leases.List()[0].client_pid, 200);
}

TEST(LeaseRegistryTest, IdsAreRandom) {
  std::set<std::string> ids;
  for (int i = 0; i < 1000; ++i) ids.insert(RandomId());
  EXPECT_EQ(ids.size(), 1000u);
}

TEST(LeaseRegistryTest, ShutdownWakesWaitersAndRefusesNewLeases) {
  LeaseRegistry leases;
  EXPECT_FALSE(leases.WaitForShutdown(absl::Milliseconds(10)));
  std::thread waiter([&] { EXPECT_TRUE(leases.WaitForShutdown(absl::Seconds(30))); });
  leases.BeginShutdown("SIGTERM");
  waiter.join();
  EXPECT_TRUE(leases.shutting_down());
  EXPECT_EQ(leases.shutdown_reason(), "SIGTERM");
  auto refused = leases.Open(1, "late");
  EXPECT_TRUE(absl::IsUnavailable(refused.status()));
}

}  // namespace
}  // namespace ddo
