#include "daemon/session/lease_registry.h"

#include <set>
#include <thread>

#include "gtest/gtest.h"
#include "daemon/common/random_id.h"

namespace ddo {
namespace {

Caller CallerOf(uid_t uid, pid_t pid) { return CallerFromCredentials(uid, uid, pid); }

TEST(LeaseRegistryTest, OpenListClose) {
  LeaseRegistry leases;
  auto a = leases.Open(CallerOf(1000, 100), "runner a");
  auto b = leases.Open(CallerOf(1000, 200), "runner b");
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
  auto refused = leases.Open(CallerOf(1000, 1), "late");
  EXPECT_TRUE(absl::IsUnavailable(refused.status()));
}

TEST(LeaseRegistryTest, LimitsPerUidAndInAllNameTheLimit) {
  LeaseRegistry leases(LeaseLimits{/*per_uid=*/2, /*in_all=*/3});
  ASSERT_TRUE(leases.Open(CallerOf(1001, 1), "a").ok());
  ASSERT_TRUE(leases.Open(CallerOf(1001, 2), "b").ok());
  auto third = leases.Open(CallerOf(1001, 3), "c");
  EXPECT_TRUE(absl::IsResourceExhausted(third.status()));
  EXPECT_NE(third.status().message().find("limit per user (2)"), std::string::npos);
  ASSERT_TRUE(leases.Open(CallerOf(1002, 4), "d").ok());  // another user is not affected
  auto fourth = leases.Open(CallerOf(1003, 5), "e");
  EXPECT_NE(fourth.status().message().find("limit in all (3)"), std::string::npos);
}

TEST(LeaseRegistryTest, ALeaseServesOnlyItsOwnUid) {
  LeaseRegistry leases;
  auto lease = leases.Open(CallerOf(1001, 10), "victim");
  ASSERT_TRUE(lease.ok());
  EXPECT_TRUE(leases.FindFor(lease->id, CallerOf(1001, 11)).ok());
  EXPECT_TRUE(absl::IsPermissionDenied(leases.FindFor(lease->id, CallerOf(1002, 12)).status()));
}

TEST(LeaseRegistryTest, ClientNamesAreEscapedAndBounded) {
  LeaseRegistry leases;
  auto lease = leases.Open(CallerOf(1001, 10), "evil\x1b[2J\n" + std::string(10000, 'x'));
  ASSERT_TRUE(lease.ok());
  EXPECT_EQ(lease->client_name.find('\x1b'), std::string::npos);
  EXPECT_EQ(lease->client_name.find('\n'), std::string::npos);
  EXPECT_LE(lease->client_name.size(), 160u);
  EXPECT_EQ(lease->client_pid, 10);  // the kernel's pid, not a request field
}

}  // namespace
}  // namespace ddo
