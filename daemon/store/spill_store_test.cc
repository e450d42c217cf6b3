// Spilling uploads (component_store_spill.cc): once the pool is 3/4 full, uploads are written
// to unnamed files in the spill directory, so that making room demotes them to those files
// instead of evicting them; the spill budget (in all and per uid) and a full disk leave an
// upload unspilled (it can then only be evicted, as before). The bytes read back through the
// spill file equal what was uploaded; nothing is left in the spill directory.
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "daemon/common/random_id.h"
#include "daemon/common/temp_dir_for_test.h"
#include "daemon/pool/shared_segment.h"
#include "daemon/store/component_store.h"
#include "gtest/gtest.h"

namespace ddo {
namespace {

constexpr uint64_t kMiB = 1 << 20;

std::vector<TensorEntry> Table(int tensors, uint64_t bytes) {
  std::vector<TensorEntry> table;
  for (int i = 0; i < tensors; ++i) {
    TensorEntry entry;
    entry.name = "t" + std::to_string(i) + ".weight";
    entry.dtype = DType::kU8;
    entry.shape = {static_cast<int64_t>(bytes)};
    entry.byte_size = bytes;
    entry.unit = static_cast<uint32_t>(i);
    table.push_back(entry);
  }
  return table;
}

char ByteOf(const std::string& key, size_t tensor, uint64_t i) {
  return static_cast<char>((i * 31 + tensor * 7 + key[0]) & 0xff);
}

class SpillStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    pool_options_.budget_bytes = 28 * kMiB;
    pool_options_.name_namespace = PoolNamespace(dir_.Join("sock"));
    spill_dir_ = dir_.Join("spill");
    std::filesystem::create_directory(spill_dir_);
  }
  void TearDown() override {
    if (store_ != nullptr) store_->Close(/*discard=*/true);
  }
  void Start(uint64_t spill_budget, uint64_t per_uid = 0) {
    registry_ = std::make_unique<SessionRegistry>();
    pool_ = std::make_unique<HostPool>(pool_options_);
    StoreOptions options{dir_.Join("manifest.json"), 2};
    options.file_system = &fs_;
    options.spill_directory = spill_dir_;
    options.spill_budget_bytes = spill_budget;
    options.max_spill_bytes_per_uid = per_uid;
    store_ = std::make_unique<ComponentStore>(*pool_, *registry_, options);
  }
  // An upload of `tensors` tensors of 256 KiB, written as a client does.
  void Upload(const std::string& key, int tensors) {
    auto registered = store_->Register(lease_, key, Table(tensors, 256 * 1024), "");
    ASSERT_TRUE(registered.ok()) << registered.status();
    auto mapping = SharedSegment::Open(registered->component.segment_name);
    ASSERT_TRUE(mapping.ok()) << mapping.status();
    const std::vector<TensorEntry>& table = registered->component.tensors;
    for (size_t t = 0; t < table.size(); ++t) {
      for (uint64_t i = 0; i < table[t].byte_size; ++i) {
        mapping->data()[table[t].offset + i] = ByteOf(key, t, i);
      }
    }
    auto ready = store_->Commit(lease_.id, registered->upload_id);
    ASSERT_TRUE(ready.ok()) << ready.status();
    EXPECT_LE(pool_->Usage().reserved_bytes, pool_->Usage().budget_bytes);
  }
  ComponentTier TierOf(const std::string& key) {
    auto got = store_->Get(key, lease_.caller);
    EXPECT_TRUE(got.ok()) << got.status();
    return got.ok() ? got->tier : ComponentTier::kPool;
  }
  void ExpectBytesAsUploaded(const std::string& key) {
    auto attached = store_->AttachHost(lease_, key);
    ASSERT_TRUE(attached.ok()) << attached.status();
    const std::vector<TensorEntry>& tensors = attached->component.tensors;
    for (size_t t = 0; t < tensors.size(); ++t) {
      std::string got(tensors[t].byte_size, '\0');
      if (attached->bytes.InFile(t)) {
        ASSERT_TRUE(attached->bytes.ReadTensor(t, got.data()).ok());
      } else {
        std::memcpy(got.data(), attached->bytes.DataOf(tensors[t]), got.size());
      }
      for (uint64_t i = 0; i < got.size(); ++i) {
        ASSERT_EQ(got[i], ByteOf(key, t, i)) << key << " tensor " << t << " byte " << i;
      }
    }
    ASSERT_TRUE(store_->Detach(attached->session_id, lease_.caller).ok());
  }

  TempDirForTest dir_;
  std::string spill_dir_;
  FaultInjectingFileSystem fs_;
  PoolOptions pool_options_;
  std::unique_ptr<SessionRegistry> registry_;
  std::unique_ptr<HostPool> pool_;
  std::unique_ptr<ComponentStore> store_;
  Lease lease_{RandomId(), 1234, "test", absl::Now(), CallerFromCredentials(4001, 4001, 1234)};
};

TEST_F(SpillStoreTest, AnUploadSpilledOnceThePoolFillsGoesToItsFileInsteadOfBeingEvicted) {
  Start(64 * kMiB);
  Upload("a", 48);  // 12 MiB of 28: no pressure, nothing spilled
  store_->WaitSpills();
  EXPECT_EQ(store_->Stats().spilled_bytes, 0u);
  Upload("b", 48);  // 24 MiB of 28: both spilled in the background
  store_->WaitSpills();
  EXPECT_EQ(store_->Stats().spilled_bytes, 24 * kMiB);
  EXPECT_EQ(store_->Stats().backing_files, 2u);
  EXPECT_TRUE(std::filesystem::is_empty(spill_dir_)) << "spill files have no name";

  // The next upload needs room: the least recently used upload goes to its spill file.
  Upload("c", 48);
  store_->WaitSpills();  // "c" too, the pool being full again
  EXPECT_EQ(TierOf("a"), ComponentTier::kFile);
  EXPECT_EQ(store_->Stats().evictions, 0u);
  ExpectBytesAsUploaded("a");
  ExpectBytesAsUploaded("b");
  ExpectBytesAsUploaded("c");

  // Read back into the pool when room is made for it.
  ASSERT_EQ(store_->DemoteForRoom(lease_.caller, 20 * kMiB, {"a"}).size(), 2u);
  auto moved = store_->Promote("a", lease_.caller, [] { return false; });
  ASSERT_TRUE(moved.ok()) << moved.status();
  EXPECT_EQ(*moved, 12 * kMiB);
  EXPECT_EQ(TierOf("a"), ComponentTier::kPool);
  ExpectBytesAsUploaded("a");

  // Evicted, a component gives its spill budget back.
  ASSERT_TRUE(store_->Evict("a", lease_.caller).ok());
  EXPECT_EQ(store_->Stats().spilled_bytes, 24 * kMiB);
}

TEST_F(SpillStoreTest, TheBudgetPerUserLeavesTheRestUnspilledAndEvictable) {
  Start(64 * kMiB, /*per_uid=*/12 * kMiB);
  Upload("a", 48);
  Upload("b", 48);
  store_->WaitSpills();
  EXPECT_EQ(store_->Stats().spilled_bytes, 12 * kMiB) << "one of the two fits the user's part";
  Upload("c", 48);
  // One of "a" and "b" was demoted (the spilled one) or evicted (the other): never both
  // demoted, and nothing exceeds the pool.
  const auto stats = store_->Stats();
  EXPECT_LE(stats.spilled_bytes, 12 * kMiB);
  EXPECT_LE(pool_->Usage().reserved_bytes, pool_->Usage().budget_bytes);
}

TEST_F(SpillStoreTest, AFullDiskLeavesAnUploadUnspilledAndLosesNothing) {
  Start(64 * kMiB);
  Upload("a", 48);
  fs_.FailAlways(FileOp::kAllocate, ENOSPC);
  Upload("b", 48);
  store_->WaitSpills();
  fs_.Heal();
  EXPECT_EQ(store_->Stats().spilled_bytes, 0u);
  EXPECT_EQ(store_->Stats().backing_files, 0u);
  EXPECT_TRUE(std::filesystem::is_empty(spill_dir_));
  ExpectBytesAsUploaded("a");
  ExpectBytesAsUploaded("b");
}

TEST_F(SpillStoreTest, NoSpillBudgetNoSpill) {
  Start(0);
  Upload("a", 48);
  Upload("b", 48);
  store_->WaitSpills();
  EXPECT_EQ(store_->Stats().spilled_bytes, 0u);
  Upload("c", 48);
  EXPECT_EQ(store_->Stats().evictions, 1u);
}

}  // namespace
}  // namespace ddo
