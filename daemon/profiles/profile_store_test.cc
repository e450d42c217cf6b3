// File: daemon/profiles/profile_store_test.cc
#include "daemon/profiles/profile_store.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <set>
#include <sstream>

#include "daemon/common/temp_dir_for_test.h"

namespace ddo {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using IfMissing = ProfileStore::IfMissing;

constexpr char kKey[] = "0123456789abcdef01234567";
constexpr char kOtherKey[] = "ffffffffffffffffffffffff";
constexpr char kSecret[] = "hunter2-s3cr3t";

std::string Record(const std::string& key, const std::string& name = "flux-1024") {
  return "{\n  \"context\": {\"name\": \"" + name + "\"},\n  \"profile_key\": \"" + key +
         "\",\n  \"schema_version\": 1\n}\n";
}

std::string FileName(const std::string& key) { return "ddo-capacity-v1-" + key + ".json"; }

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

void WriteFile(const std::string& path, const std::string& text, mode_t mode = 0600) {
  std::ofstream(path) << text;
  ::chmod(path.c_str(), mode);
}

mode_t Mode(const std::string& path) {
  struct stat info {};
  EXPECT_EQ(::lstat(path.c_str(), &info), 0) << path;
  return info.st_mode & 07777;
}

std::set<std::string> Entries(const std::string& dir) {
  std::set<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir))
    names.insert(entry.path().filename().string());
  return names;
}

// Runs `call` and fails (instead of hanging) when it does not return within 10 s; `unblock`
// then releases it.
template <typename Call, typename Unblock>
auto WithinSeconds(Call call, Unblock unblock) {
  auto result = std::async(std::launch::async, call);
  if (result.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
    ADD_FAILURE() << "the call blocked";
    unblock();
  }
  return result.get();
}

class ProfileStoreTest : public ::testing::Test {
 protected:
  ProfileStoreTest() : root_(tmp_.Join("profiles")), secret_(tmp_.Join("secret")) {
    // Another file of ddod's user (root's, when the tests run as root) that must never be
    // served, overwritten or chmod-ed: a valid profile, so following a link to it would work.
    WriteFile(secret_,
              "{\"profile_key\": \"" + std::string(kKey) + "\", \"s\": \"" + kSecret + "\"}\n");
    secret_text_ = ReadAll(secret_);
  }

  ProfileStore User(uid_t uid, IfMissing if_missing = IfMissing::kCreate) {
    absl::StatusOr<ProfileStore> store = ProfileStore::ForUser(root_, uid, if_missing);
    EXPECT_TRUE(store.ok()) << store.status();
    return *std::move(store);
  }
  std::string UserFile(uid_t uid, const std::string& key) {
    return root_ + "/" + std::to_string(uid) + "/" + FileName(key);
  }
  void ExpectSecretUntouched() {
    EXPECT_EQ(ReadAll(secret_), secret_text_);
    EXPECT_EQ(Mode(secret_), 0600);
  }

  TempDirForTest tmp_;
  std::string root_;
  std::string secret_;
  std::string secret_text_;
};

TEST_F(ProfileStoreTest, TheDirectoryFollowsTheSeedsRules) {
  EXPECT_EQ(ResolveProfileDir("", "", "/home/u"), "/home/u/.ddo/profiles");
  EXPECT_EQ(ResolveProfileDir("", "~/p", "/home/u"), "/home/u/p");
  EXPECT_EQ(ResolveProfileDir("/x", "~/p", "/home/u"), "/x");
}

TEST_F(ProfileStoreTest, AMissingStoreHoldsNothingAndIsNotCreatedByReading) {
  ProfileStore store = User(1000, IfMissing::kEmpty);
  EXPECT_TRUE(store.List()->empty());
  EXPECT_EQ(store.Get(kKey).status().code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(*store.Delete(kKey));
  EXPECT_EQ(store.Put(kKey, Record(kKey)).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE(fs::exists(root_));
}

TEST_F(ProfileStoreTest, WrittenProfilesAreReadListedAndDeleted) {
  ProfileStore store = User(1000);
  absl::StatusOr<ProfileFile> written = store.Put(kKey, Record(kKey));
  ASSERT_TRUE(written.ok()) << written.status();
  EXPECT_EQ(written->name, "flux-1024");
  EXPECT_EQ(written->json, Record(kKey));
  EXPECT_GT(written->modified_unix_ms, 0);
  EXPECT_TRUE(fs::is_regular_file(UserFile(1000, kKey)));
  EXPECT_EQ(Mode(root_), 0700);
  EXPECT_EQ(Mode(root_ + "/1000"), 0700);
  EXPECT_EQ(Mode(UserFile(1000, kKey)), 0600);

  // A store opened later (without creating) sees it too.
  ProfileStore again = User(1000, IfMissing::kEmpty);
  absl::StatusOr<ProfileFile> read = again.Get(kKey);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->json, Record(kKey));  // exactly as stored
  EXPECT_EQ(read->name, "flux-1024");
  EXPECT_EQ(read->modified_unix_ms, written->modified_unix_ms);
  ASSERT_EQ(again.List()->size(), 1u);
  EXPECT_TRUE(*again.Delete(kKey));
  EXPECT_FALSE(*again.Delete(kKey));
  EXPECT_EQ(again.Get(kKey).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(ProfileStoreTest, ATextWithoutAFinalNewlineGetsOne) {
  std::string text = Record(kKey);
  text.pop_back();
  ASSERT_TRUE(User(1000).Put(kKey, text).ok());
  EXPECT_EQ(ReadAll(UserFile(1000, kKey)), Record(kKey));
}

TEST_F(ProfileStoreTest, BadKeysAreRefusedEscapedAndTruncated) {
  ProfileStore store = User(1000);
  const std::string bad_keys[] = {"../x",
                                  "a/b",
                                  "\n",
                                  "..",
                                  std::string("0123456789abcdef0123456\0", 24),
                                  "ABC",
                                  "0123456789ABCDEF01234567",
                                  "../etc/passwd",
                                  std::string(300, 'a'),
                                  ""};
  for (const std::string& key : bad_keys) {
    SCOPED_TRACE(key);
    EXPECT_EQ(store.Put(key, Record(key)).status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(store.Get(key).status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(store.Delete(key).status().code(), absl::StatusCode::kInvalidArgument);
  }
  const std::string newline = std::string(store.Get("\n").status().message());
  EXPECT_THAT(newline, HasSubstr("\"\\x0a\""));
  EXPECT_EQ(newline.find('\n'), std::string::npos);
  EXPECT_LT(store.Get(std::string(300, 'a')).status().message().size(), 200u);
  EXPECT_EQ(Entries(root_ + "/1000").size(), 0u);
  EXPECT_EQ(Entries(tmp_.path()).size(), 2u);  // profiles/ and secret: nothing escaped
}

TEST_F(ProfileStoreTest, BadRecordsAreRefused) {
  ProfileStore store = User(1000);
  EXPECT_THAT(store.Put(kKey, "not json").status().message(), HasSubstr("not a JSON object"));
  EXPECT_THAT(store.Put(kKey, "[1, 2]").status().message(), HasSubstr("not a JSON object"));
  EXPECT_THAT(store.Put(kKey, "\"text\"").status().message(), HasSubstr("not a JSON object"));
  EXPECT_THAT(store.Put(kKey, Record(kOtherKey)).status().message(),
              HasSubstr("\"profile_key\" must be"));
  EXPECT_TRUE(Entries(root_ + "/1000").empty());
}

TEST_F(ProfileStoreTest, TheSizeLimitIsTheStoredText) {
  ProfileStore store = User(1000);
  // {"profile_key": "<key>", "pad": "xxx..."} of exactly `size` bytes, without a newline.
  const auto sized = [](size_t size) {
    const std::string head = "{\"profile_key\": \"" + std::string(kKey) + "\", \"pad\": \"";
    return head + std::string(size - head.size() - 2, 'x') + "\"}";
  };
  EXPECT_EQ(store.Put(kKey, sized(kMaxProfileBytes)).status().code(),
            absl::StatusCode::kInvalidArgument);  // its newline would make it one byte too long
  EXPECT_EQ(store.Put(kKey, sized(kMaxProfileBytes + 1) + "\n").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(fs::exists(UserFile(1000, kKey)));
  absl::StatusOr<ProfileFile> largest = store.Put(kKey, sized(kMaxProfileBytes - 1));
  ASSERT_TRUE(largest.ok()) << largest.status();
  EXPECT_EQ(fs::file_size(UserFile(1000, kKey)), kMaxProfileBytes);
  EXPECT_TRUE(store.Get(kKey).ok());
}

// A listing is read whole and sent as one message, and a user may list many times at once: the
// bytes one store holds, and one listing reads, are bounded.
TEST_F(ProfileStoreTest, AStoreHoldsABoundedNumberOfBytesAndAListingReadsNoMore) {
  ProfileStore store = User(1000);
  const auto padded = [](const std::string& key, size_t size) {
    const std::string head = "{\"profile_key\": \"" + key + "\", \"pad\": \"";
    return head + std::string(size - head.size() - 3, 'x') + "\"}\n";
  };
  const size_t each = kMaxProfileBytes;
  const size_t fit = kMaxStoreBytes / each;
  std::vector<std::string> keys;
  for (size_t i = 0; i < fit; ++i) {
    char key[32];
    std::snprintf(key, sizeof(key), "%024zx", i + 1);
    keys.push_back(key);
    ASSERT_TRUE(store.Put(key, padded(key, each)).ok()) << i;
  }
  const absl::Status full = store.Put(kKey, Record(kKey)).status();
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted) << full;
  EXPECT_THAT(full.message(), HasSubstr("delete some first"));
  EXPECT_TRUE(store.Put(keys[0], Record(keys[0])).ok()) << "a smaller replacement fits";
  EXPECT_TRUE(store.Put(kKey, Record(kKey)).ok()) << "and leaves room";

  // Files put there before the limit (planted here): the listing stops at the limit.
  for (size_t i = 0; i < 3; ++i) {
    char key[32];
    std::snprintf(key, sizeof(key), "%024zx", fit + 100 + i);
    WriteFile(UserFile(1000, key), padded(key, each));
  }
  absl::StatusOr<std::vector<ProfileFile>> listed = store.List();
  ASSERT_TRUE(listed.ok()) << listed.status();
  size_t bytes = 0;
  for (const ProfileFile& file : *listed) bytes += file.json.size();
  EXPECT_LE(bytes, kMaxStoreBytes);
  EXPECT_LT(listed->size(), fit + 1 + 3);
}

TEST_F(ProfileStoreTest, AnOversizeFileIsRefusedWithoutItsSizeOrBytes) {
  ProfileStore store = User(1000);
  const size_t size = kMaxProfileBytes + 4321;
  WriteFile(UserFile(1000, kKey),
            "{\"s\": \"" + std::string(kSecret) + std::string(size - 23, 'x') + "\"}");
  ASSERT_EQ(fs::file_size(UserFile(1000, kKey)), size);
  const absl::Status status = store.Get(kKey).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr(kKey));
  EXPECT_THAT(status.message(), Not(HasSubstr(std::to_string(size))));
  EXPECT_THAT(status.message(), Not(HasSubstr(kSecret)));
  EXPECT_TRUE(store.List()->empty());
}

TEST_F(ProfileStoreTest, ACorruptFileIsSkippedWhenListedAndReportedWhenRead) {
  ProfileStore store = User(1000);
  ASSERT_TRUE(store.Put(kKey, Record(kKey)).ok());
  WriteFile(UserFile(1000, kOtherKey), std::string("{ truncated ") + kSecret);
  WriteFile(root_ + "/1000/unrelated.json", "{}");
  absl::StatusOr<std::vector<ProfileFile>> listed = store.List();
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0].key, kKey);
  const absl::Status corrupt = store.Get(kOtherKey).status();
  EXPECT_EQ(corrupt.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(corrupt.message(), Not(HasSubstr(kSecret)));
}

TEST_F(ProfileStoreTest, UsersAreSeparated) {
  ASSERT_TRUE(User(1000).Put(kKey, Record(kKey)).ok());
  ProfileStore other = User(1001);
  EXPECT_TRUE(other.List()->empty());
  EXPECT_EQ(other.Get(kKey).status().code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(*other.Delete(kKey));
  EXPECT_TRUE(fs::exists(UserFile(1000, kKey)));
  EXPECT_EQ(User(1000).List()->size(), 1u);
  EXPECT_EQ(Mode(root_ + "/1001"), 0700);
}

TEST_F(ProfileStoreTest, ASymlinkOrFilePlantedAsTheUserDirectoryIsRefused) {
  User(1001);  // creates the root
  const std::string victim = tmp_.Join("victim");
  ASSERT_TRUE(fs::create_directory(victim));
  ::chmod(victim.c_str(), 0755);
  fs::create_directory_symlink(victim, root_ + "/1000");
  for (IfMissing if_missing : {IfMissing::kEmpty, IfMissing::kCreate}) {
    absl::StatusOr<ProfileStore> store = ProfileStore::ForUser(root_, 1000, if_missing);
    EXPECT_EQ(store.status().code(), absl::StatusCode::kPermissionDenied);
    EXPECT_THAT(store.status().message(), HasSubstr("symbolic link or not a directory"));
  }
  EXPECT_TRUE(Entries(victim).empty());
  EXPECT_EQ(Mode(victim), 0755);  // not chmod-ed

  WriteFile(root_ + "/1002", "");
  EXPECT_EQ(ProfileStore::ForUser(root_, 1002, IfMissing::kCreate).status().code(),
            absl::StatusCode::kPermissionDenied);

  // The root itself, as a symlink.
  fs::create_directory_symlink(victim, tmp_.Join("linked-root"));
  EXPECT_EQ(
      ProfileStore::ForUser(tmp_.Join("linked-root"), 1000, IfMissing::kCreate).status().code(),
      absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(Entries(victim).empty());
}

TEST_F(ProfileStoreTest, ADirectoryOthersCanWriteIsRefusedAndNotChmoded) {
  ASSERT_TRUE(fs::create_directory(root_));
  ::chmod(root_.c_str(), 0777);
  absl::StatusOr<ProfileStore> store = ProfileStore::ForUser(root_, 1000, IfMissing::kCreate);
  EXPECT_EQ(store.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(store.status().message(), HasSubstr("writable by its group or others"));
  EXPECT_EQ(Mode(root_), 0777);
  EXPECT_TRUE(Entries(root_).empty());

  ::chmod(root_.c_str(), 0700);
  ASSERT_TRUE(fs::create_directory(root_ + "/1000"));
  ::chmod((root_ + "/1000").c_str(), 0770);
  EXPECT_EQ(ProfileStore::ForUser(root_, 1000, IfMissing::kCreate).status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(Mode(root_ + "/1000"), 0770);
}

TEST_F(ProfileStoreTest, ASymlinkToAnotherFileIsNeverFollowed) {
  ProfileStore store = User(1000);
  fs::create_symlink(secret_, UserFile(1000, kKey));
  const absl::Status status = store.Get(kKey).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(status.message(), HasSubstr("symbolic link"));
  EXPECT_THAT(status.message(), Not(HasSubstr(kSecret)));
  EXPECT_TRUE(store.List()->empty());
  ExpectSecretUntouched();

  // Writing replaces the link itself; the file it named keeps its bytes.
  ASSERT_TRUE(store.Put(kKey, Record(kKey)).ok());
  EXPECT_FALSE(fs::is_symlink(UserFile(1000, kKey)));
  EXPECT_EQ(ReadAll(UserFile(1000, kKey)), Record(kKey));
  ExpectSecretUntouched();

  // Deleting removes a link, never its target.
  fs::remove(UserFile(1000, kKey));
  fs::create_symlink(secret_, UserFile(1000, kKey));
  EXPECT_TRUE(*store.Delete(kKey));
  EXPECT_FALSE(fs::exists(fs::symlink_status(UserFile(1000, kKey))));
  ExpectSecretUntouched();
}

TEST_F(ProfileStoreTest, AHardLinkToAnotherFileIsRefused) {
  ProfileStore store = User(1000);
  ASSERT_EQ(::link(secret_.c_str(), UserFile(1000, kKey).c_str()), 0) << std::strerror(errno);
  const absl::Status status = store.Get(kKey).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(status.message(), HasSubstr("hard links"));
  EXPECT_THAT(status.message(), Not(HasSubstr(kSecret)));
  EXPECT_TRUE(store.List()->empty());
  ASSERT_TRUE(store.Put(kKey, Record(kKey)).ok());  // replaces the link, not the file
  ExpectSecretUntouched();
  EXPECT_EQ(ReadAll(UserFile(1000, kKey)), Record(kKey));
}

TEST_F(ProfileStoreTest, AFifoIsRefusedWithoutBlocking) {
  ProfileStore store = User(1000);
  const std::string fifo = UserFile(1000, kKey);
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const auto unblock = [&] { ::close(::open(fifo.c_str(), O_WRONLY | O_NONBLOCK)); };
  const absl::Status status = WithinSeconds([&] { return store.Get(kKey).status(); }, unblock);
  EXPECT_EQ(status.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(status.message(), HasSubstr("not a regular file"));
}

TEST_F(ProfileStoreTest, ListingSkipsDirectoriesSymlinksAndFifos) {
  ProfileStore store = User(1000);
  ASSERT_TRUE(store.Put(kKey, Record(kKey)).ok());
  const std::string directory_key = "111111111111111111111111";
  const std::string symlink_key = "222222222222222222222222";
  const std::string fifo_key = "333333333333333333333333";
  ASSERT_TRUE(fs::create_directory(UserFile(1000, directory_key)));
  WriteFile(tmp_.Join("elsewhere"), Record(symlink_key));  // a valid profile, behind a link
  fs::create_symlink(tmp_.Join("elsewhere"), UserFile(1000, symlink_key));
  ASSERT_EQ(::mkfifo(UserFile(1000, fifo_key).c_str(), 0600), 0);
  const auto unblock = [&] {
    ::close(::open(UserFile(1000, fifo_key).c_str(), O_WRONLY | O_NONBLOCK));
  };
  absl::StatusOr<std::vector<ProfileFile>> listed =
      WithinSeconds([&] { return store.List(); }, unblock);
  ASSERT_TRUE(listed.ok()) << listed.status();
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0].key, kKey);
  EXPECT_EQ(store.Get(directory_key).status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(store.Get(symlink_key).status().code(), absl::StatusCode::kPermissionDenied);
}

TEST_F(ProfileStoreTest, WritesUseFreshTemporaryFilesThatNothingPlantedRedirects) {
  ProfileStore store = User(1000);
  // The name the old store used for its temporary file, planted as a link to another file.
  const std::string old_temporary =
      root_ + "/1000/." + FileName(kKey) + "." + std::to_string(::getpid()) + ".tmp";
  fs::create_symlink(secret_, old_temporary);
  ASSERT_TRUE(store.Put(kKey, Record(kKey, "first")).ok());
  ASSERT_TRUE(store.Put(kKey, Record(kKey, "second")).ok());
  ExpectSecretUntouched();
  EXPECT_EQ(store.Get(kKey)->name, "second");
  // No temporary file is left behind: only the profile and what was planted.
  EXPECT_THAT(Entries(root_ + "/1000"),
              ElementsAre(fs::path(old_temporary).filename().string(), FileName(kKey)));
  struct stat info {};
  ASSERT_EQ(::stat(UserFile(1000, kKey).c_str(), &info), 0);
  EXPECT_EQ(info.st_uid, ::geteuid());
  EXPECT_EQ(info.st_mode & 07777, 0600u);
}

TEST_F(ProfileStoreTest, AStoreHoldsABoundedNumberOfProfiles) {
  ProfileStore store = User(1000);
  for (size_t i = 0; i < kMaxProfilesPerStore; ++i) {
    char key[32];
    std::snprintf(key, sizeof(key), "%024zx", i + 1);
    WriteFile(UserFile(1000, key), Record(key));
  }
  EXPECT_EQ(store.Put(kKey, Record(kKey)).status().code(), absl::StatusCode::kResourceExhausted);
  const std::string existing = "000000000000000000000001";
  EXPECT_TRUE(store.Put(existing, Record(existing, "replaced")).ok());  // replacing is fine
  EXPECT_TRUE(*store.Delete(existing));
  EXPECT_TRUE(store.Put(kKey, Record(kKey)).ok());
}

TEST_F(ProfileStoreTest, ANamedDirectoryIsCreatedPrivateOrUsedAsItIs) {
  const std::string created = tmp_.Join("a/b/profiles");
  absl::StatusOr<ProfileStore> store =
      ProfileStore::ForDirectory(created + "/", IfMissing::kCreate);
  ASSERT_TRUE(store.ok()) << store.status();
  ASSERT_TRUE(store->Put(kKey, Record(kKey)).ok());
  EXPECT_EQ(Mode(created), 0700);
  EXPECT_EQ(Mode(tmp_.Join("a")), 0700);

  const std::string existing = tmp_.Join("existing");
  ASSERT_TRUE(fs::create_directory(existing));
  ::chmod(existing.c_str(), 0751);
  store = ProfileStore::ForDirectory(existing, IfMissing::kCreate);
  ASSERT_TRUE(store.ok()) << store.status();
  ASSERT_TRUE(store->Put(kKey, Record(kKey)).ok());
  EXPECT_EQ(Mode(existing), 0751);  // never chmod-ed

  // Reading a missing directory creates nothing.
  store = ProfileStore::ForDirectory(tmp_.Join("missing/profiles"), IfMissing::kEmpty);
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_TRUE(store->List()->empty());
  EXPECT_FALSE(fs::exists(tmp_.Join("missing")));

  // A symlink planted in a named directory is refused like anywhere else.
  store = ProfileStore::ForDirectory(existing, IfMissing::kEmpty);
  ASSERT_TRUE(store.ok()) << store.status();
  fs::create_symlink(secret_, existing + "/" + FileName(kOtherKey));
  EXPECT_EQ(store->Get(kOtherKey).status().code(), absl::StatusCode::kPermissionDenied);
}

TEST_F(ProfileStoreTest, ANamedDirectoryMustBeAbsoluteAndNoSymlink) {
  EXPECT_EQ(ProfileStore::ForDirectory("relative/profiles", IfMissing::kCreate).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ProfileStore::ForDirectory("", IfMissing::kCreate).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ProfileStore::ForDirectory("/", IfMissing::kCreate).status().code(),
            absl::StatusCode::kInvalidArgument);
  const std::string victim = tmp_.Join("victim");
  ASSERT_TRUE(fs::create_directory(victim));
  fs::create_directory_symlink(victim, tmp_.Join("link"));
  EXPECT_EQ(ProfileStore::ForDirectory(tmp_.Join("link"), IfMissing::kCreate).status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(ProfileStore::ForDirectory(tmp_.Join("link") + "/", IfMissing::kEmpty).status().code(),
            absl::StatusCode::kPermissionDenied);
  // A symlink among the parents is the caller's own business: allowed.
  ASSERT_TRUE(ProfileStore::ForDirectory(tmp_.Join("link/profiles"), IfMissing::kCreate).ok());
  EXPECT_THAT(Entries(victim), ElementsAre("profiles"));
}

// Ownership checks need a second owner: only root can make one.
TEST_F(ProfileStoreTest, FilesAndDirectoriesOfOtherOwnersAreRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to chown";
  ProfileStore store = User(1000);
  WriteFile(UserFile(1000, kKey), Record(kKey));
  ASSERT_EQ(::chown(UserFile(1000, kKey).c_str(), 4242, 4242), 0);
  const absl::Status status = store.Get(kKey).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(status.message(), HasSubstr("does not belong to ddod's uid"));
  EXPECT_TRUE(store.List()->empty());

  ASSERT_TRUE(fs::create_directory(root_ + "/1001"));
  ::chmod((root_ + "/1001").c_str(), 0700);
  ASSERT_EQ(::chown((root_ + "/1001").c_str(), 1001, 1001), 0);
  EXPECT_EQ(ProfileStore::ForUser(root_, 1001, IfMissing::kCreate).status().code(),
            absl::StatusCode::kPermissionDenied);
  struct stat info {};
  ASSERT_EQ(::stat((root_ + "/1001").c_str(), &info), 0);
  EXPECT_EQ(info.st_uid, 1001u);  // not chown-ed back
}

}  // namespace
}  // namespace ddo
