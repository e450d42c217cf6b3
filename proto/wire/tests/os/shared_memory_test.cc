#include "ddo/os/shared_memory.h"

#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "child_process.h"
#include "ddo/os/process_watch.h"
#include "gtest/gtest.h"

#ifdef _WIN32
// clang-format off
#include <windows.h>
#include <aclapi.h>
// clang-format on
#else
#include <sys/stat.h>
#endif

namespace ddo::os {
namespace {

using test::ChildProcess;

// A name no other run of the tests uses.
std::string UniqueName(const std::string& what) {
  static int counter = 0;
  return absl::StrCat("ddo-os-test-", CurrentProcessId(), "-", what, "-", ++counter);
}

// Removes the name at the end of a test (POSIX; nothing to do on Windows).
struct NameGuard {
  std::string name;
  ~NameGuard() { (void)SharedMemory::Remove(name); }
};

TEST(SharedMemoryTest, TwoProcessesShareANamedSegment) {
  const NameGuard guard{UniqueName("share")};
  absl::StatusOr<SharedMemory> segment = SharedMemory::Create(guard.name, 1 << 20);
  ASSERT_TRUE(segment.ok()) << segment.status();
  EXPECT_GE(segment->size(), 1u << 20);
  absl::StatusOr<MappedView> view = segment->Map(/*writable=*/true);
  ASSERT_TRUE(view.ok()) << view.status();
  char* bytes = static_cast<char*>(view->data());
  EXPECT_EQ(bytes[(1 << 20) - 1], 0) << "a new segment is zero-filled";
  std::strcpy(bytes, "parent");

  absl::StatusOr<ChildProcess> child = ChildProcess::Start({"share", guard.name});
  ASSERT_TRUE(child.ok()) << child.status();
  EXPECT_EQ(child->Wait(), 0);
  EXPECT_STREQ(bytes + 64, "child") << "the child's write reaches this process's view";
}

TEST(SharedMemoryTest, ANameIsNeverTakenOver) {
  const NameGuard guard{UniqueName("twice")};
  absl::StatusOr<SharedMemory> first = SharedMemory::Create(guard.name, 4096);
  ASSERT_TRUE(first.ok()) << first.status();
  absl::StatusOr<SharedMemory> second = SharedMemory::Create(guard.name, 4096);
  EXPECT_TRUE(absl::IsAlreadyExists(second.status())) << second.status();
}

TEST(SharedMemoryTest, BadNamesAndSizesAreRefusedWithTheReason) {
  for (const std::string& name :
       {std::string(), std::string("a/b"), std::string("a\\b"), std::string(".."),
        std::string(201, 'x'), std::string("Global\\x")}) {
    absl::StatusOr<SharedMemory> made = SharedMemory::Create(name, 4096);
    EXPECT_TRUE(absl::IsInvalidArgument(made.status())) << name << ": " << made.status();
    EXPECT_TRUE(absl::IsInvalidArgument(SharedMemory::Open(name, false).status())) << name;
  }
  absl::StatusOr<SharedMemory> empty = SharedMemory::Create(UniqueName("empty"), 0);
  EXPECT_TRUE(absl::IsInvalidArgument(empty.status())) << empty.status();
  EXPECT_NE(empty.status().message().find("at least one byte"), absl::string_view::npos);
}

TEST(SharedMemoryTest, OpeningWhatIsNotThereIsNotFound) {
  absl::StatusOr<SharedMemory> missing = SharedMemory::Open(UniqueName("missing"), false);
  EXPECT_TRUE(absl::IsNotFound(missing.status())) << missing.status();
}

TEST(SharedMemoryTest, AReadOnlyOpenMapsReadOnly) {
  const NameGuard guard{UniqueName("ro")};
  absl::StatusOr<SharedMemory> made = SharedMemory::Create(guard.name, 8192);
  ASSERT_TRUE(made.ok()) << made.status();
  absl::StatusOr<SharedMemory> reader = SharedMemory::Open(guard.name, /*writable=*/false);
  ASSERT_TRUE(reader.ok()) << reader.status();
  EXPECT_FALSE(reader->writable());
  EXPECT_GE(reader->size(), 8192u);
  EXPECT_TRUE(reader->Map(/*writable=*/false).ok());
  absl::StatusOr<MappedView> writer = reader->Map(/*writable=*/true);
  EXPECT_TRUE(absl::IsFailedPrecondition(writer.status())) << writer.status();
}

TEST(SharedMemoryTest, TheNameGoesWithRemoveOrTheLastHandle) {
  const std::string name = UniqueName("gone");
  {
    absl::StatusOr<SharedMemory> made = SharedMemory::Create(name, 4096);
    ASSERT_TRUE(made.ok()) << made.status();
    ASSERT_TRUE(SharedMemory::Remove(name).ok());
  }
  absl::StatusOr<SharedMemory> after = SharedMemory::Open(name, false);
  EXPECT_TRUE(absl::IsNotFound(after.status())) << after.status();
}

TEST(SharedMemoryTest, ANewSegmentAdmitsItsOwnerOnly) {
  const NameGuard guard{UniqueName("owner")};
  absl::StatusOr<SharedMemory> made = SharedMemory::Create(guard.name, 4096);
  ASSERT_TRUE(made.ok()) << made.status();
#ifdef _WIN32
  // The DACL has one entry, this account's; the same account opens it from another process.
  PACL dacl = nullptr;
  PSECURITY_DESCRIPTOR descriptor = nullptr;
  ASSERT_EQ(::GetSecurityInfo(made->handle().get(), SE_KERNEL_OBJECT,
                              DACL_SECURITY_INFORMATION, nullptr, nullptr, &dacl, nullptr,
                              &descriptor),
            static_cast<DWORD>(ERROR_SUCCESS));
  ASSERT_NE(dacl, nullptr) << "a null DACL would admit everyone";
  EXPECT_EQ(dacl->AceCount, 1);
  ::LocalFree(descriptor);
  absl::StatusOr<ChildProcess> child = ChildProcess::Start({"open", guard.name});
  ASSERT_TRUE(child.ok()) << child.status();
  EXPECT_EQ(child->Wait(), 0);
#else
  struct stat info {};
  ASSERT_EQ(::fstat(made->handle().get(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0600u);
#endif
}

TEST(SharedMemoryTest, AnUnknownGroupIsNotFound) {
  SegmentAccess access;
  access.group = "ddo-no-such-group-x";
  absl::StatusOr<SharedMemory> made = SharedMemory::Create(UniqueName("group"), 4096, access);
  EXPECT_TRUE(absl::IsNotFound(made.status())) << made.status();
}

}  // namespace
}  // namespace ddo::os
