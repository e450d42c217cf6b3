#include "daemon/common/descriptor_reserve.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <vector>

#include "ddo/wire/unique_fd.h"
#include "gtest/gtest.h"

namespace ddo {
namespace {

TEST(DescriptorReserveTest, CountsTheOpenDescriptors) {
  absl::StatusOr<size_t> before = CountOpenDescriptors();
  ASSERT_TRUE(before.ok()) << before.status();
  std::vector<UniqueFd> opened;
  for (int i = 0; i < 5; ++i) opened.emplace_back(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  absl::StatusOr<size_t> after = CountOpenDescriptors();
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(*after, *before + 5);
}

TEST(DescriptorReserveTest, ANewConnectionMayNotEatIntoTheReserve) {
  size_t open = 0;
  DescriptorReserve reserve(1000, 256, [&]() -> absl::StatusOr<size_t> { return open; });
  open = 700;
  EXPECT_FALSE(reserve.Exhausted(100));
  open = 744;
  EXPECT_FALSE(reserve.Exhausted(100)) << "744 open leaves exactly the reserve";
  open = 745;
  EXPECT_TRUE(reserve.Exhausted(100));
  open = 10;
  EXPECT_TRUE(reserve.Exhausted(744)) << "every number below the newest is open: no count";
  DescriptorReserve failing(1000, 256, []() -> absl::StatusOr<size_t> {
    return absl::ResourceExhaustedError("open /proc/self/fd: Too many open files");
  });
  EXPECT_TRUE(failing.Exhausted(3)) << "a count that fails says yes";
}

TEST(DescriptorReserveTest, AReserveOverHalfTheLimitIsCut) {
  DescriptorReserve reserve(512, 10000, []() -> absl::StatusOr<size_t> { return 0; });
  EXPECT_EQ(reserve.reserve(), 256u);
}

TEST(DescriptorReserveTest, RaisingTheLimitReachesTheHardLimit) {
  rlimit files{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &files), 0);
  absl::StatusOr<DescriptorLimit> raised = RaiseDescriptorLimit();
  ASSERT_TRUE(raised.ok()) << raised.status();
  EXPECT_EQ(raised->soft_before, files.rlim_cur);
  EXPECT_EQ(raised->soft, files.rlim_max);
  EXPECT_EQ(raised->hard, files.rlim_max);
  ::setrlimit(RLIMIT_NOFILE, &files);  // as it was, for the other tests
}

}  // namespace
}  // namespace ddo
