// File: daemon/profiles/profile_store_test.cc
#include "daemon/profiles/profile_store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "daemon/session/lease_registry.h"

namespace ddo {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

constexpr char kKey[] = "0123456789abcdef01234567";

std::string Record(const std::string& key, const std::string& name = "flux-1024") {
  return "{\n  \"context\": {\"name\": \"" + name + "\"},\n  \"profile_key\": \"" + key +
         "\",\n  \"schema_version\": 1\n}\n";
}

class ProfileStoreTest : public ::testing::Test {
 protected:
  ProfileStoreTest() : dir_((fs::temp_directory_path() / ("ddo-profiles-" + RandomId())).string()) {}
  ~ProfileStoreTest() override { fs::remove_all(dir_); }
  std::string dir_;
};

TEST_F(ProfileStoreTest, TheDirectoryFollowsTheSeedsRules) {
  EXPECT_EQ(ResolveProfileDir("", "", "/home/u"), "/home/u/.ddo/profiles");
  EXPECT_EQ(ResolveProfileDir("", "~/p", "/home/u"), "/home/u/p");
  EXPECT_EQ(ResolveProfileDir("/x", "~/p", "/home/u"), "/x");
}

TEST_F(ProfileStoreTest, WrittenProfilesAreReadListedAndDeleted) {
  EXPECT_TRUE(ListProfiles(dir_)->empty());  // no directory yet: no profiles
  absl::StatusOr<ProfileFile> written = WriteProfile(dir_, kKey, Record(kKey));
  ASSERT_TRUE(written.ok()) << written.status();
  EXPECT_EQ(written->name, "flux-1024");
  EXPECT_TRUE(fs::exists(fs::path(dir_) / "ddo-capacity-v1-0123456789abcdef01234567.json"));
  EXPECT_EQ((fs::status(dir_).permissions() & fs::perms::all), fs::perms::owner_all);
  absl::StatusOr<ProfileFile> read = ReadProfile(dir_, kKey);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->json, Record(kKey));  // exactly as stored
  EXPECT_GT(read->modified_unix_ms, 0);
  ASSERT_EQ(ListProfiles(dir_)->size(), 1u);
  EXPECT_TRUE(*DeleteProfile(dir_, kKey));
  EXPECT_FALSE(*DeleteProfile(dir_, kKey));
  EXPECT_EQ(ReadProfile(dir_, kKey).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(ProfileStoreTest, BadKeysAndRecordsAreRefusedByName) {
  EXPECT_EQ(WriteProfile(dir_, "../etc/passwd", Record(kKey)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(WriteProfile(dir_, kKey, "not json").status().message(), HasSubstr("not a JSON object"));
  EXPECT_THAT(WriteProfile(dir_, kKey, Record("ffffffffffffffffffffffff")).status().message(),
              HasSubstr("\"profile_key\" must be"));
  EXPECT_EQ(ReadProfile(dir_, "ABC").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(ProfileStoreTest, ACorruptFileIsSkippedWhenListedAndReportedWhenRead) {
  ASSERT_TRUE(WriteProfile(dir_, kKey, Record(kKey)).ok());
  const std::string corrupt = "ffffffffffffffffffffffff";
  std::ofstream(fs::path(dir_) / ("ddo-capacity-v1-" + corrupt + ".json")) << "{ truncated";
  std::ofstream(fs::path(dir_) / "unrelated.json") << "{}";
  absl::StatusOr<std::vector<ProfileFile>> listed = ListProfiles(dir_);
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0].key, kKey);
  EXPECT_EQ(ReadProfile(dir_, corrupt).status().code(), absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace ddo
