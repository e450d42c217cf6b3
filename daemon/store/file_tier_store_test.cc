// The store's file tier: a safetensors load larger than the pool can hold is served from its
// files (tier kFile), with its descriptors kept, instead of being refused.
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "daemon/common/random_id.h"
#include "daemon/common/temp_dir_for_test.h"
#include "daemon/store/component_store.h"
#include "daemon/store/safetensors_for_test.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ddo {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kMiB = 1 << 20;

std::string Pattern(uint64_t bytes, int seed) {
  std::string out(bytes, '\0');
  for (uint64_t i = 0; i < bytes; ++i) out[i] = static_cast<char>((i * 7 + seed * 13) & 0xff);
  return out;
}

size_t OpenDescriptors() {
  size_t count = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    ++count;
  }
  return count;
}

// A user of a shared ddod, not an admin.
Lease LeaseOf(uid_t uid) {
  return Lease{RandomId(), 10 + static_cast<int64_t>(uid), "user", absl::Now(),
               CallerFromCredentials(uid, uid, 10 + static_cast<pid_t>(uid))};
}

class FileTierStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    pool_options_.budget_bytes = 2 * kMiB;  // the model below is 3 MiB
    pool_options_.name_namespace = PoolNamespace(dir_.Join("sock"));
    path_ = dir_.Join("model.safetensors");
    ASSERT_TRUE(WriteU8Safetensors(path_, {{"a.weight", first_}, {"b.weight", second_}}));
    Restart();
  }
  void TearDown() override {
    store_->Close(/*discard=*/true);
    store_.reset();
  }
  void Restart() {
    if (store_ != nullptr) store_->Close(/*discard=*/false);
    store_.reset();
    registry_ = std::make_unique<SessionRegistry>();
    pool_ = std::make_unique<HostPool>(pool_options_);
    StoreOptions options{dir_.Join("manifest.json"), 2};
    options.max_backing_files_per_uid = max_backing_files_per_uid_;
    options.max_backing_files = max_backing_files_;
    store_ = std::make_unique<ComponentStore>(*pool_, *registry_, options);
    store_->AdoptPrevious();
  }
  absl::StatusOr<LoadResult> Load(const std::string& key, FileTier tier = FileTier::kAuto,
                                  const std::string& content_hash = "",
                                  const Lease* lease = nullptr) {
    SafetensorsRequest request;
    request.cache_key = key;
    request.files.push_back(SourceOf(path_));
    request.file_tier = tier;
    request.content_hash = content_hash;
    return store_->LoadSafetensors(
        lease != nullptr ? *lease : lease_, std::move(request), [](uint64_t, uint64_t) {},
        [] { return false; });
  }
  std::string HashOfPayloads() const {
    ContentHasher hasher;
    hasher.Update(first_.data(), first_.size());
    hasher.Update(second_.data(), second_.size());
    return hasher.Digest();
  }

  TempDirForTest dir_;
  std::string path_;
  const std::string first_ = Pattern(2 * kMiB, 1);
  const std::string second_ = Pattern(kMiB + 100, 2);
  PoolOptions pool_options_;
  size_t max_backing_files_per_uid_ = 256;
  size_t max_backing_files_ = 4096;
  std::unique_ptr<SessionRegistry> registry_;
  std::unique_ptr<HostPool> pool_;
  std::unique_ptr<ComponentStore> store_;
  Lease lease_{RandomId(), 1234, "test", absl::Now(), DaemonCaller()};
};

TEST_F(FileTierStoreTest, OverBudgetLoadIsServedFromItsFiles) {
  auto loaded = Load("big");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_FALSE(loaded->warm_hit);
  const ComponentSnapshot& component = loaded->component;
  EXPECT_EQ(component.state, ComponentState::kReady);
  EXPECT_EQ(component.tier, ComponentTier::kFile);
  EXPECT_EQ(component.total_bytes, first_.size() + second_.size());
  EXPECT_EQ(component.file_bytes, component.total_bytes);
  EXPECT_EQ(component.pool_bytes, 0u);
  EXPECT_TRUE(component.segment_name.empty());
  EXPECT_TRUE(component.segments.empty());
  EXPECT_EQ(pool_->Usage().reserved_bytes, 0u) << "nothing in the pool";
  const StoreStats stats = store_->Stats();
  EXPECT_EQ(stats.components, 1u);
  EXPECT_EQ(stats.used_bytes, 0u);
  EXPECT_EQ(stats.file_bytes, component.total_bytes);
  EXPECT_EQ(stats.backing_files, 1u);
  auto got = store_->Get("big", DaemonCaller());
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->tier, ComponentTier::kFile);
  // The same files again: a warm hit on the file-backed entry.
  auto again = Load("big");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(again->warm_hit);
  EXPECT_EQ(store_->Stats().backing_files, 1u);
}

TEST_F(FileTierStoreTest, NeverKeepsTheOldRefusal) {
  auto refused = Load("big", FileTier::kNever);
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(absl::IsResourceExhausted(refused.status())) << refused.status();
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("more than the whole budget"));
  EXPECT_TRUE(absl::IsNotFound(store_->Get("big", DaemonCaller()).status()));
}

TEST_F(FileTierStoreTest, AComponentThatFitsStaysInThePool) {
  pool_options_.budget_bytes = 8 * kMiB;
  Restart();
  auto loaded = Load("small");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->component.tier, ComponentTier::kPool);
  EXPECT_EQ(loaded->component.pool_bytes, loaded->component.total_bytes);
  EXPECT_EQ(loaded->component.file_bytes, 0u);
  EXPECT_FALSE(loaded->component.segment_name.empty());
  // Its descriptor is kept, so that it can be demoted to its file (tiering_store_test.cc).
  EXPECT_EQ(store_->Stats().backing_files, 1u);
}

TEST_F(FileTierStoreTest, BytesReadBackEqualTheFiles) {
  ASSERT_TRUE(Load("big").ok());
  auto attached = store_->AttachHost(lease_, "big");
  ASSERT_TRUE(attached.ok()) << attached.status();
  const ComponentBytes& bytes = attached->bytes;
  ASSERT_NE(bytes.files(), nullptr);
  ASSERT_TRUE(bytes.InFile(0) && bytes.InFile(1));
  EXPECT_FALSE(bytes.InFile(2));
  std::string a(first_.size(), '\0');
  std::string b(second_.size(), '\0');
  ASSERT_TRUE(bytes.ReadTensor(0, a.data()).ok());
  ASSERT_TRUE(bytes.ReadTensor(1, b.data()).ok());
  EXPECT_TRUE(a == first_);
  EXPECT_TRUE(b == second_);
  EXPECT_TRUE(absl::IsFailedPrecondition(bytes.ReadTensor(2, a.data())));
  // A unit's ranges, coalesced: one read of both tensors.
  const std::vector<FileRange> unit = CoalesceRanges(bytes.files()->ranges(), 0);
  ASSERT_EQ(unit.size(), 1u);
  std::string both(TotalRangeBytes(unit), '\0');
  ASSERT_TRUE(bytes.ReadRanges(unit, both.data()).ok());
  EXPECT_TRUE(both == first_ + second_);
  // In use: not evicted.
  EXPECT_TRUE(absl::IsFailedPrecondition(store_->Evict("big", DaemonCaller()).status()));
  EXPECT_TRUE(store_->Detach(attached->session_id, DaemonCaller()).ok());
}

TEST_F(FileTierStoreTest, EvictionClosesTheDescriptors) {
  const size_t before = OpenDescriptors();
  ASSERT_TRUE(Load("big").ok());
  EXPECT_EQ(OpenDescriptors(), before + 1) << "the client's descriptor is kept, not copied";
  auto evicted = store_->Evict("big", DaemonCaller());
  ASSERT_TRUE(evicted.ok()) << evicted.status();
  EXPECT_EQ(*evicted, 0u) << "no pool bytes to release";
  EXPECT_EQ(OpenDescriptors(), before);
  EXPECT_EQ(store_->Stats().backing_files, 0u);
}

TEST_F(FileTierStoreTest, AGivenContentHashIsCheckedOnTheFiles) {
  const size_t before = OpenDescriptors();
  {
    // (A snapshot of a file-tier component holds its files open while it lives.)
    auto good = Load("big", FileTier::kAuto, HashOfPayloads());
    ASSERT_TRUE(good.ok()) << good.status();
    EXPECT_EQ(good->component.content_hash, HashOfPayloads());
  }
  ASSERT_TRUE(store_->Evict("big", DaemonCaller()).ok());
  auto bad = Load("big", FileTier::kAuto, "xxh3-64:0123456789abcdef");
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(bad.status())) << bad.status();
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("content hash mismatch"));
  EXPECT_TRUE(absl::IsNotFound(store_->Get("big", DaemonCaller()).status()));
  EXPECT_EQ(OpenDescriptors(), before);
}

TEST_F(FileTierStoreTest, NotSharedByProofAndNotAdoptedAfterARestart) {
  const Lease owner = LeaseOf(5001);
  const Lease other = LeaseOf(5002);
  auto first = Load("big", FileTier::kAuto, "", &owner);
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = Load("big", FileTier::kAuto, "", &other);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_FALSE(second->warm_hit) << "a file-backed entry is never another uid's to share";
  EXPECT_EQ(second->component.tier, ComponentTier::kFile);
  EXPECT_EQ(store_->Stats().backing_files, 2u);
  Restart();
  EXPECT_TRUE(absl::IsNotFound(store_->Get("big", owner.caller).status()));
  EXPECT_EQ(store_->Stats().components, 0u);
}

TEST_F(FileTierStoreTest, AFileTierBaseCannotBeDerivedFrom) {
  ASSERT_TRUE(Load("big").ok());
  DerivedRequest request;
  request.cache_key = "big-edit";
  request.base_cache_key = "big";
  request.changed_tensors = {"a.weight"};
  request.content_hash = "xxh3-64:0123456789abcdef";
  auto derived = store_->RegisterDerived(lease_, request);
  EXPECT_TRUE(absl::IsFailedPrecondition(derived.status())) << derived.status();
}

// The attack: file-tier components cost a user no pool bytes, so without a bound one user
// could keep loading keys until ddod ran out of descriptors, and then nobody could connect.
TEST_F(FileTierStoreTest, TheDescriptorsAUserMayKeepOpenAreBounded) {
  max_backing_files_per_uid_ = 2;
  max_backing_files_ = 3;
  Restart();
  const Lease user = LeaseOf(5001);
  const Lease other = LeaseOf(5002);
  const size_t before = OpenDescriptors();
  ASSERT_TRUE(Load("one", FileTier::kPrefer, "", &user).ok());
  ASSERT_TRUE(Load("two", FileTier::kPrefer, "", &user).ok());
  auto third = Load("three", FileTier::kPrefer, "", &user);
  ASSERT_FALSE(third.ok());
  EXPECT_TRUE(absl::IsResourceExhausted(third.status())) << third.status();
  EXPECT_THAT(std::string(third.status().message()), HasSubstr("uid 5001 keeps 2 backing file"));
  EXPECT_THAT(std::string(third.status().message()), HasSubstr("evict"));
  EXPECT_EQ(OpenDescriptors(), before + 2) << "the refused load's descriptor is closed";
  // Another user is bound by what is left of ddod's total.
  ASSERT_TRUE(Load("one", FileTier::kPrefer, "", &other).ok());
  auto over = Load("two", FileTier::kPrefer, "", &other);
  ASSERT_FALSE(over.ok());
  EXPECT_THAT(std::string(over.status().message()), HasSubstr("ddod keeps 3 backing files"));
  // An administrator too (not bound per uid, bound in all).
  auto admin = Load("admin", FileTier::kPrefer);
  EXPECT_TRUE(absl::IsResourceExhausted(admin.status())) << admin.status();
  // Evicting gives the room back.
  ASSERT_TRUE(store_->Evict("one", user.caller).ok());
  EXPECT_TRUE(Load("three", FileTier::kPrefer, "", &user).ok());
  EXPECT_EQ(store_->Stats().backing_files, 3u);
}

// A load the pool cannot hold and the file tier may not keep gets both reasons.
TEST_F(FileTierStoreTest, AnAutoLoadPastTheDescriptorBoundSaysWhy) {
  max_backing_files_per_uid_ = 1;
  Restart();
  const Lease user = LeaseOf(5001);
  ASSERT_TRUE(Load("one", FileTier::kAuto, "", &user).ok());
  auto refused = Load("two", FileTier::kAuto, "", &user);
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(absl::IsResourceExhausted(refused.status())) << refused.status();
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("backing file"));
}

// What the pool can give it stays in the pool; the rest is read from the files.
TEST_F(FileTierStoreTest, AnAutoLoadKeepsWhatThePoolCanHoldAndSpreadsIt) {
  pool_options_.budget_bytes = 12 * kMiB;
  Restart();
  std::vector<std::pair<std::string, std::string>> tensors;
  for (int i = 0; i < 64; ++i) tensors.push_back({"t" + std::to_string(100 + i), Pattern(256 << 10, i)});
  const std::string path = dir_.Join("many.safetensors");
  ASSERT_TRUE(WriteU8Safetensors(path, tensors));
  SafetensorsRequest request;
  request.cache_key = "many";
  request.files.push_back(SourceOf(path));
  auto loaded = store_->LoadSafetensors(lease_, std::move(request), [](uint64_t, uint64_t) {},
                                        [] { return false; });
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  const ComponentSnapshot& component = loaded->component;
  EXPECT_EQ(component.tier, ComponentTier::kSplit);
  EXPECT_EQ(component.pool_bytes + component.file_bytes, component.total_bytes);
  EXPECT_GT(component.pool_bytes, 4 * kMiB);
  EXPECT_LE(pool_->Usage().reserved_bytes, pool_options_.budget_bytes - 4 * kMiB)
      << "room is left for streaming sessions";
  auto attached = store_->AttachHost(lease_, "many");
  ASSERT_TRUE(attached.ok()) << attached.status();
  const ComponentBytes& bytes = attached->bytes;
  int in_file = 0;
  int alternations = 0;
  std::string read(256 << 10, '\0');
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorEntry& tensor = attached->component.tensors[i];
    if (bytes.InFile(i)) {
      ++in_file;
      ASSERT_TRUE(bytes.ReadTensor(i, read.data()).ok());
      EXPECT_EQ(read, tensors[i].second) << tensor.name;
    } else {
      EXPECT_EQ(std::string(bytes.DataOf(tensor), tensor.byte_size), tensors[i].second)
          << tensor.name;
    }
    if (i > 0 && bytes.InFile(i) != bytes.InFile(i - 1)) ++alternations;
  }
  EXPECT_GT(in_file, 0);
  EXPECT_LT(in_file, 64);
  EXPECT_GT(alternations, 8) << "pool units are spread, not one block";
  ASSERT_TRUE(store_->Detach(attached->session_id, lease_.caller).ok());
  // Never in the manifest: a restart adopts nothing of it.
  Restart();
  EXPECT_TRUE(absl::IsNotFound(store_->Get("many", lease_.caller).status()));
}

}  // namespace
}  // namespace ddo
