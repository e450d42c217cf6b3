#include "daemon/identity/caller_registry.h"

#include <fcntl.h>
#include <unistd.h>

#include <memory>

#include "gtest/gtest.h"

namespace ddo {
namespace {

PassedFile DevNull(const std::string& name) {
  return PassedFile{name, UniqueFd(::open("/dev/null", O_RDONLY | O_CLOEXEC))};
}

TEST(CallerRegistryTest, TokensIdentifyTheirCallerUntilRemoved) {
  CallerRegistry callers;
  const std::string token = callers.Add(CallerFromCredentials(1001, 1001, 42));
  EXPECT_EQ(token.size(), 32u);
  auto found = callers.Find(token);
  ASSERT_TRUE(found.ok());
  EXPECT_EQ(found->uid, 1001u);
  EXPECT_EQ(found->pid, 42);
  EXPECT_TRUE(absl::IsUnauthenticated(callers.Find("0123456789abcdef0123456789abcdef").status()));
  callers.Remove(token);
  EXPECT_TRUE(absl::IsUnauthenticated(callers.Find(token).status()));
}

TEST(CallerRegistryTest, AdminIsRootOrDaemonsOwnUser) {
  EXPECT_TRUE(CallerFromCredentials(0, 0, 1).admin);
  EXPECT_TRUE(CallerFromCredentials(::geteuid(), 0, 1).admin);
  const uid_t stranger = ::geteuid() == 4242 ? 4243 : 4242;
  EXPECT_FALSE(CallerFromCredentials(stranger, stranger, 1).admin);
}

TEST(CallerRegistryTest, PassedFilesAreTakenOnceAndOnlyByTheirConnection) {
  CallerRegistry callers;
  const std::string mine = callers.Add(CallerFromCredentials(1001, 1001, 1));
  const std::string theirs = callers.Add(CallerFromCredentials(1002, 1002, 2));
  auto a = callers.AddFile(mine, DevNull("a.safetensors"));
  auto b = callers.AddFile(mine, DevNull("b.safetensors"));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(*a, *b);
  // Another connection cannot use my handles.
  EXPECT_TRUE(absl::IsInvalidArgument(callers.TakeFiles(theirs, {*a}).status()));
  // A handle named twice, or an unknown one, takes nothing.
  EXPECT_FALSE(callers.TakeFiles(mine, {*a, *a}).ok());
  EXPECT_FALSE(callers.TakeFiles(mine, {*a, 999}).ok());
  auto taken = callers.TakeFiles(mine, {*b, *a});
  ASSERT_TRUE(taken.ok());
  ASSERT_EQ(taken->size(), 2u);
  EXPECT_EQ((*taken)[0].name, "b.safetensors");
  EXPECT_TRUE((*taken)[1].fd.valid());
  EXPECT_FALSE(callers.TakeFiles(mine, {*a}).ok());  // used once
}

TEST(CallerRegistryTest, HeldFilesAreBoundedPerConnection) {
  CallerRegistry callers;
  const std::string token = callers.Add(CallerFromCredentials(1001, 1001, 1));
  for (size_t i = 0; i < CallerRegistry::kMaxHeldFiles; ++i) {
    ASSERT_TRUE(callers.AddFile(token, DevNull("f")).ok());
  }
  auto refused = callers.AddFile(token, DevNull("f"));
  EXPECT_TRUE(absl::IsResourceExhausted(refused.status()));
  EXPECT_NE(refused.status().message().find("per connection"), std::string::npos);
}

TEST(CallerRegistryTest, GrantsAreTheOnlyWayToASegment) {
  CallerRegistry callers;
  const std::string token = callers.Add(CallerFromCredentials(1001, 1001, 1));
  EXPECT_FALSE(callers.CheckGrant(token, "/ddo-x", false).ok());
  callers.Grant(token, "/ddo-x", /*writable=*/false);
  EXPECT_TRUE(callers.CheckGrant(token, "/ddo-x", false).ok());
  EXPECT_TRUE(absl::IsPermissionDenied(callers.CheckGrant(token, "/ddo-x", true)));
  callers.Grant(token, "/ddo-x", /*writable=*/true);
  EXPECT_TRUE(callers.CheckGrant(token, "/ddo-x", true).ok());
  callers.Grant(token, "/ddo-x", /*writable=*/false);  // never narrows
  EXPECT_TRUE(callers.CheckGrant(token, "/ddo-x", true).ok());
}

TEST(CallerRegistryTest, FileGrantsKeepTheirDescriptorAndAreReadOnly) {
  CallerRegistry callers;
  const std::string token = callers.Add(CallerFromCredentials(1001, 1001, 1));
  auto file = std::make_shared<const UniqueFd>(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  ASSERT_TRUE(file->valid());
  SegmentGrant grant = SegmentGrant::File("/ddo-file-x", file);
  grant.writable = true;  // asked for, never given
  callers.Grant(token, grant);
  auto found = callers.FindGrant(token, "/ddo-file-x", /*writable=*/false);
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_EQ(found->kind, SegmentKind::kFile);
  EXPECT_EQ(found->file, file);  // the same descriptor, shared
  EXPECT_FALSE(found->writable);  // a file grant is read-only, whatever it asked
  EXPECT_TRUE(absl::IsPermissionDenied(callers.CheckGrant(token, "/ddo-file-x", true)));
  // Without a descriptor a file grant grants nothing.
  callers.Grant(token, SegmentGrant::File("/ddo-file-y", nullptr));
  EXPECT_TRUE(absl::IsFailedPrecondition(callers.CheckGrant(token, "/ddo-file-y", false)));
  // The registry lets go of the descriptor with the connection.
  found = absl::CancelledError("dropped");
  grant.file.reset();
  EXPECT_GT(file.use_count(), 1);
  callers.Remove(token);
  EXPECT_EQ(file.use_count(), 1);
}

TEST(CallerRegistryTest, APipeGrantIsServedOnceWriteOnlyAndThenHeldByNobody) {
  CallerRegistry callers;
  const std::string token = callers.Add(CallerFromCredentials(1001, 1001, 1));
  const std::string other = callers.Add(CallerFromCredentials(1002, 1002, 2));
  int ends[2];
  ASSERT_EQ(::pipe2(ends, O_CLOEXEC), 0);
  UniqueFd read_end(ends[0]);
  auto write_end = std::make_shared<const UniqueFd>(ends[1]);
  callers.Grant(token, SegmentGrant::Pipe("/ddo-stream-x-0", write_end));
  write_end.reset();  // the grant alone holds it now
  // Another connection, or a read-only OPEN, gets nothing and takes nothing.
  EXPECT_TRUE(absl::IsFailedPrecondition(
      callers.ServeGrant(other, "/ddo-stream-x-0", /*writable=*/true).status()));
  EXPECT_TRUE(absl::IsPermissionDenied(
      callers.ServeGrant(token, "/ddo-stream-x-0", /*writable=*/false).status()));
  absl::StatusOr<SegmentGrant> served =
      callers.ServeGrant(token, "/ddo-stream-x-0", /*writable=*/true);
  ASSERT_TRUE(served.ok()) << served.status();
  EXPECT_EQ(served->kind, SegmentKind::kPipe);
  EXPECT_EQ(served->file.use_count(), 1);  // taken out of the registry
  // Served once.
  EXPECT_TRUE(absl::IsFailedPrecondition(
      callers.ServeGrant(token, "/ddo-stream-x-0", /*writable=*/true).status()));
  // With the served grant gone, nobody in ddod holds the write end: the reader sees its end.
  served = absl::CancelledError("dropped");
  char byte = 0;
  EXPECT_EQ(::read(read_end.get(), &byte, 1), 0);
}

}  // namespace
}  // namespace ddo
