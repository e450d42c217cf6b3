#include "daemon/common/descriptor_reserve.h"

#ifdef _WIN32
#include <windows.h>
#else
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>
#endif

#include <vector>

#include "daemon/common/wine_for_test.h"
#include "ddo/os/native_handle.h"
#include "gtest/gtest.h"

namespace ddo {
namespace {

// Opens the null device: one more descriptor (a handle on Windows), closed when it goes.
os::NativeHandle OpenNullDevice() {
#ifdef _WIN32
  return os::NativeHandle(::CreateFileW(L"NUL", GENERIC_READ, 0, nullptr, OPEN_EXISTING, 0,
                                        nullptr));
#else
  return os::NativeHandle(::open("/dev/null", O_RDONLY | O_CLOEXEC));
#endif
}

TEST(DescriptorReserveTest, CountsTheOpenDescriptors) {
  absl::StatusOr<size_t> before = CountOpenDescriptors();
  ASSERT_TRUE(before.ok()) << before.status();
  std::vector<os::NativeHandle> opened;
  for (int i = 0; i < 5; ++i) opened.push_back(OpenNullDevice());
  absl::StatusOr<size_t> after = CountOpenDescriptors();
  ASSERT_TRUE(after.ok());
  if (RunningUnderWine()) GTEST_SKIP() << "wine counts no handles";
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

#ifdef _WIN32
TEST(DescriptorReserveTest, WindowsHasNoLimitToRaise) {
  absl::StatusOr<DescriptorLimit> raised = RaiseDescriptorLimit();
  ASSERT_TRUE(raised.ok()) << raised.status();
  EXPECT_EQ(raised->soft, raised->hard);
  EXPECT_EQ(DescriptorReserve::ForThisProcess(256).limit(), raised->hard);
}
#else
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
#endif

}  // namespace
}  // namespace ddo
