#include "daemon/common/connection_table.h"

#include <set>
#include <string>
#include <utility>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ddo {
namespace {

using ::testing::HasSubstr;

constexpr uid_t kAlice = 1001;
constexpr uid_t kBob = 1002;
constexpr uid_t kRoot = 0;

std::string MessageOf(const absl::Status& status) { return std::string(status.message()); }

TEST(ConnectionTableTest, EachUidHasItsShareAndTheRefusalNamesTheLimit) {
  ConnectionTable table("gRPC socket", ConnectionLimits{2, 10});
  EXPECT_TRUE(table.Admit(10, 1, kAlice, false).ok());
  EXPECT_TRUE(table.Admit(11, 2, kAlice, false).ok());
  const absl::Status third = table.Admit(12, 3, kAlice, false);
  EXPECT_TRUE(absl::IsResourceExhausted(third));
  EXPECT_THAT(MessageOf(third),
              HasSubstr("uid 1001 already holds 2 connections to the gRPC socket, the limit per "
                        "user"));
  EXPECT_TRUE(table.Admit(12, 3, kBob, false).ok()) << "another uid is not bound by Alice's";
  table.Release(10);
  EXPECT_TRUE(table.Admit(13, 4, kAlice, false).ok()) << "a released slot is free again";
  EXPECT_EQ(table.CountOf(kAlice), 2u);
  EXPECT_EQ(table.size(), 3u);
}

TEST(ConnectionTableTest, TheTotalRefusesEveryoneButAdminsWhoKeepTheirPerUidLimit) {
  ConnectionTable table("identity socket", ConnectionLimits{2, 3});
  EXPECT_TRUE(table.Admit(10, 1, kAlice, false).ok());
  EXPECT_TRUE(table.Admit(11, 2, kAlice, false).ok());
  EXPECT_TRUE(table.Admit(12, 3, kBob, false).ok());
  const absl::Status full = table.Admit(13, 4, kBob, false);
  EXPECT_THAT(MessageOf(full),
              HasSubstr("the identity socket already has 3 connections, the limit in all"));
  EXPECT_TRUE(table.Admit(13, 4, kRoot, true).ok()) << "ddoctl still gets in";
  EXPECT_TRUE(table.Admit(14, 5, kRoot, true).ok());
  EXPECT_THAT(MessageOf(table.Admit(15, 6, kRoot, true)), HasSubstr("uid 0 already holds 2"));
}

TEST(ConnectionTableTest, ConnectionsClosedUnseenAreSweptBeforeAnyoneIsRefused) {
  // What is "still open", as (fd, inode): the test's stand-in for fstat.
  std::set<std::pair<int, ino_t>> open;
  int asked = 0;
  absl::Time now = absl::FromUnixSeconds(1000);
  ConnectionTable table(
      "gRPC socket", ConnectionLimits{2, 10},
      [&](int fd, ino_t inode) {
        ++asked;
        return open.count({fd, inode}) > 0;
      },
      [&] { return now; });
  open = {{10, 1}, {11, 2}};
  EXPECT_TRUE(table.Admit(10, 1, kAlice, false).ok());
  EXPECT_TRUE(table.Admit(11, 2, kAlice, false).ok());
  EXPECT_EQ(asked, 0) << "nobody is asked about while the limits are not reached";
  EXPECT_FALSE(table.Admit(12, 3, kAlice, false).ok());
  open.erase({10, 1});  // its owner closed it
  now += ConnectionTable::kSweepInterval;
  EXPECT_TRUE(table.Admit(12, 3, kAlice, false).ok());
  open.insert({12, 3});
  // Descriptor 11 now names another file (another inode): its connection is gone.
  open.erase({11, 2});
  open.insert({11, 99});
  now += ConnectionTable::kSweepInterval;
  EXPECT_TRUE(table.Admit(13, 4, kAlice, false).ok());
  EXPECT_EQ(table.CountOf(kAlice), 2u);
}

TEST(ConnectionTableTest, ACallerRefusedInALoopDoesNotMakeEachRefusalASweep) {
  int asked = 0;
  absl::Time now = absl::FromUnixSeconds(1000);
  ConnectionTable table(
      "gRPC socket", ConnectionLimits{2, 10},
      [&](int, ino_t) {
        ++asked;
        return true;  // every connection stays open
      },
      [&] { return now; });
  EXPECT_TRUE(table.Admit(10, 1, kAlice, false).ok());
  EXPECT_TRUE(table.Admit(11, 2, kAlice, false).ok());
  for (int i = 0; i < 10000; ++i) EXPECT_FALSE(table.Admit(12, 3, kAlice, false).ok());
  EXPECT_EQ(asked, 2) << "one sweep (of the two connections) for ten thousand refusals";
  now += ConnectionTable::kSweepInterval;
  EXPECT_FALSE(table.Admit(12, 3, kAlice, false).ok());
  EXPECT_EQ(asked, 4) << "the next interval sweeps again";
}

TEST(ConnectionTableTest, AReusedDescriptorNumberReplacesItsOldConnection) {
  ConnectionTable table("gRPC socket", ConnectionLimits{1, 10}, [](int, ino_t) { return true; });
  EXPECT_TRUE(table.Admit(10, 1, kAlice, false).ok());
  // The kernel gave 10 out again: Alice's connection on it is closed, Bob's is new.
  EXPECT_TRUE(table.Admit(10, 2, kBob, false).ok());
  EXPECT_EQ(table.CountOf(kAlice), 0u);
  EXPECT_EQ(table.CountOf(kBob), 1u);
  EXPECT_EQ(table.size(), 1u);
}

}  // namespace
}  // namespace ddo
