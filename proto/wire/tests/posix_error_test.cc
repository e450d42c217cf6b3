#include "ddo/wire/posix_error.h"

#include <cerrno>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ddo {
namespace {

using ::testing::HasSubstr;

TEST(PosixErrorTest, MapsErrnoToCanonicalCodesAndKeepsContext) {
  EXPECT_TRUE(absl::IsNotFound(PosixError("open /x", ENOENT)));
  EXPECT_TRUE(absl::IsPermissionDenied(PosixError("open /x", EACCES)));
  EXPECT_TRUE(absl::IsAlreadyExists(PosixError("mkdir /x", EEXIST)));
  EXPECT_TRUE(absl::IsResourceExhausted(PosixError("mmap", ENOMEM)));
  EXPECT_TRUE(absl::IsInvalidArgument(PosixError("bind", EINVAL)));
  EXPECT_TRUE(absl::IsInternal(PosixError("read", EIO)));
  EXPECT_THAT(std::string(PosixError("open /etc/ddo", ENOENT).message()),
              HasSubstr("open /etc/ddo: No such file or directory"));
}

}  // namespace
}  // namespace ddo
