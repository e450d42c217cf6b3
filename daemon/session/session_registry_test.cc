// File: daemon/session/session_registry_test.cc
#include "daemon/session/session_registry.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace ddo {
namespace {

using ::testing::HasSubstr;

Lease LeaseOf(uid_t uid, const std::string& id, bool admin = false) {
  Lease lease;
  lease.id = id;
  lease.caller.uid = uid;
  lease.caller.admin = admin;
  return lease;
}

TEST(SessionRegistryTest, ASessionIsItsUsersOrAnAdmins) {
  SessionRegistry registry;
  const Lease owner = LeaseOf(5001, "lease-a");
  absl::StatusOr<std::string> id = registry.Add(owner, "model");
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(id->size(), 32u);  // 128 random bits, hex
  absl::StatusOr<SessionRecord> found = registry.FindFor(*id, owner.caller);
  ASSERT_TRUE(found.ok());
  EXPECT_EQ(found->cache_key, "model");
  EXPECT_EQ(found->device, "");  // a host attach until the stream layer says otherwise
  EXPECT_TRUE(absl::IsPermissionDenied(registry.FindFor(*id, LeaseOf(5002, "b").caller).status()));
  EXPECT_TRUE(registry.FindFor(*id, LeaseOf(0, "c", /*admin=*/true).caller).ok());
  // An unknown id is named by a short, escaped prefix only.
  absl::Status unknown = registry.FindFor(std::string(200, 'x') + "\n", owner.caller).status();
  EXPECT_TRUE(absl::IsNotFound(unknown));
  EXPECT_LT(unknown.message().size(), 64u);
}

TEST(SessionRegistryTest, StreamingIsRecordedAndRemovalEndsIt) {
  SessionRegistry registry;
  const Lease owner = LeaseOf(5001, "lease-a");
  const std::string id = *registry.Add(owner, "model");
  ASSERT_TRUE(registry.MarkStreaming(id, "GPU-1234").ok());
  EXPECT_EQ(registry.FindFor(id, owner.caller)->device, "GPU-1234");
  std::optional<SessionRecord> removed = registry.Remove(id);
  ASSERT_TRUE(removed.has_value());
  EXPECT_EQ(removed->device, "GPU-1234");
  EXPECT_FALSE(registry.Remove(id).has_value());
  EXPECT_TRUE(absl::IsNotFound(registry.MarkStreaming(id, "GPU-1234")));
}

TEST(SessionRegistryTest, TheLimitPerUserIsNamedAndFreedByRemoval) {
  SessionRegistry registry(/*max_per_uid=*/2);
  const Lease user = LeaseOf(5001, "lease-a");
  const std::string first = *registry.Add(user, "a");
  ASSERT_TRUE(registry.Add(user, "b").ok());
  absl::StatusOr<std::string> third = registry.Add(user, "c");
  EXPECT_TRUE(absl::IsResourceExhausted(third.status()));
  EXPECT_THAT(third.status().message(), HasSubstr("the limit per user (2)"));
  // Another user and an admin are not bound by it.
  EXPECT_TRUE(registry.Add(LeaseOf(5002, "lease-b"), "a").ok());
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(registry.Add(LeaseOf(0, "root", true), "a").ok());
  ASSERT_TRUE(registry.Remove(first).has_value());
  EXPECT_TRUE(registry.Add(user, "c").ok());
}

TEST(SessionRegistryTest, ALeaseTakesItsSessionsAlong) {
  SessionRegistry registry(/*max_per_uid=*/2);
  const Lease first = LeaseOf(5001, "lease-a");
  const Lease second = LeaseOf(5001, "lease-b");
  ASSERT_TRUE(registry.Add(first, "a").ok());
  ASSERT_TRUE(registry.Add(first, "b").ok());
  EXPECT_FALSE(registry.Add(second, "c").ok());  // the uid's limit spans its leases
  std::vector<SessionRecord> removed = registry.RemoveLease("lease-a");
  EXPECT_EQ(removed.size(), 2u);
  EXPECT_EQ(registry.size(), 0u);
  EXPECT_TRUE(registry.Add(second, "c").ok());
  EXPECT_EQ(registry.List().size(), 1u);
}

}  // namespace
}  // namespace ddo
