// Faults injected through the FileSystem seam (daemon/common/file_system.h) into the
// component store: a full /dev/shm, a failed shm_open, a truncated segment, a manifest that
// cannot be written, a safetensors file that cannot be read. Each test checks the status the
// caller gets and that nothing is lost or leaked: no segment left in /dev/shm, the pool's
// accounting back where it was, the previous manifest still valid.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>

#include "daemon/common/file_system.h"
#include "daemon/common/random_id.h"
#include "daemon/common/temp_dir_for_test.h"
#include "daemon/pool/shared_segment.h"
#include "daemon/store/component_store.h"
#include "daemon/store/manifest.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ddo {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kMiB = 1 << 20;

std::vector<TensorEntry> Table(int count, uint64_t bytes) {
  std::vector<TensorEntry> tensors;
  for (int i = 0; i < count; ++i) {
    TensorEntry tensor;
    tensor.name = "blocks." + std::to_string(i) + ".weight";
    tensor.dtype = DType::kBF16;
    tensor.shape = {static_cast<int64_t>(bytes / 2)};
    tensor.byte_size = bytes;
    tensor.unit = static_cast<uint32_t>(i);
    tensors.push_back(tensor);
  }
  return tensors;
}

// A safetensors file of two F32 tensors of `floats` each; returns the offset of the data.
uint64_t WriteSafetensors(const std::string& path, int64_t floats) {
  const uint64_t bytes = static_cast<uint64_t>(floats) * 4;
  std::string header = "{\"a\":{\"dtype\":\"F32\",\"shape\":[" + std::to_string(floats) +
                       "],\"data_offsets\":[0," + std::to_string(bytes) +
                       "]},\"b\":{\"dtype\":\"F32\",\"shape\":[" + std::to_string(floats) +
                       "],\"data_offsets\":[" + std::to_string(bytes) + "," +
                       std::to_string(2 * bytes) + "]}}";
  header.resize((header.size() + 7) / 8 * 8, ' ');
  std::string file(8, '\0');
  for (int i = 0; i < 8; ++i) file[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  file += header;
  file += std::string(2 * bytes, '\x42');
  std::FILE* out = std::fopen(path.c_str(), "wb");
  std::fwrite(file.data(), 1, file.size(), out);
  std::fclose(out);
  return 8 + header.size();
}

class StoreFaultsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    pool_options_.budget_bytes = 16 * kMiB;
    pool_options_.name_namespace = PoolNamespace(dir_.Join("sock"));
    pool_options_.file_system = &fs_;
    Restart();
  }
  void TearDown() override {
    fs_.Heal();
    store_->Close(/*discard=*/true);
    store_.reset();
    EXPECT_TRUE(pool_->ListSegmentNames().empty()) << "a segment leaked into /dev/shm";
  }

  // A new pool and store over the same segments and manifest, as a restarted ddod.
  void Restart() {
    store_.reset();
    registry_ = std::make_unique<SessionRegistry>();  // a restarted ddod has a new one
    pool_ = std::make_unique<HostPool>(pool_options_);
    store_ = std::make_unique<ComponentStore>(*pool_, *registry_,
                                              StoreOptions{dir_.Join("manifest.json"), 2});
    store_->AdoptPrevious();
  }

  ComponentSnapshot Upload(const std::string& key) {
    auto registered = store_->Register(lease_, key, Table(2, kMiB), "");
    EXPECT_TRUE(registered.ok()) << registered.status();
    auto ready = store_->Commit(lease_.id, registered->upload_id);
    EXPECT_TRUE(ready.ok()) << ready.status();
    return *ready;
  }

  SafetensorsRequest RequestFor(const std::string& key, const std::string& path) {
    SafetensorsRequest request;
    request.cache_key = key;
    request.files.push_back(SafetensorsSource{
        "model.safetensors", UniqueFd(::open(path.c_str(), O_RDONLY | O_CLOEXEC))});
    return request;
  }

  std::vector<std::string> ManifestKeys() {
    auto manifest = ReadManifest(dir_.Join("manifest.json"));
    EXPECT_TRUE(manifest.ok()) << manifest.status();
    std::vector<std::string> keys;
    if (manifest.ok()) {
      for (const ManifestComponent& component : *manifest) keys.push_back(component.cache_key);
    }
    return keys;
  }

  TempDirForTest dir_;
  FaultInjectingFileSystem fs_;
  PoolOptions pool_options_;
  std::unique_ptr<SessionRegistry> registry_;
  std::unique_ptr<HostPool> pool_;
  std::unique_ptr<ComponentStore> store_;
  Lease lease_{RandomId(), 1234, "test", absl::Now(), DaemonCaller()};
};

TEST_F(StoreFaultsTest, AFullShmRefusesTheUploadAndLeavesNothing) {
  Upload("kept");
  const PoolUsage before = pool_->Usage();
  fs_.FailNth(FileOp::kAllocate, ENOSPC);
  auto refused = store_->Register(lease_, "new", Table(1, kMiB), "");
  EXPECT_TRUE(absl::IsResourceExhausted(refused.status())) << refused.status();
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("No space left on device"));
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr(pool_->name_prefix()));
  EXPECT_TRUE(absl::IsNotFound(store_->Get("new", DaemonCaller()).status()));
  EXPECT_EQ(pool_->Usage().reserved_bytes, before.reserved_bytes);
  EXPECT_EQ(pool_->ListSegmentNames().size(), 1u) << "only the kept component's segment";
  EXPECT_TRUE(store_->Register(lease_, "new", Table(1, kMiB), "").ok()) << "room again";
}

TEST_F(StoreFaultsTest, AFailedShmOpenWhenCreatingIsNamed) {
  fs_.FailNth(FileOp::kShmOpen, EMFILE);
  auto refused = store_->Register(lease_, "new", Table(1, kMiB), "");
  EXPECT_TRUE(absl::IsResourceExhausted(refused.status())) << refused.status();
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("shm_open " + pool_->name_prefix()));
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("Too many open files"));
  EXPECT_EQ(pool_->Usage().segments, 0u);
  EXPECT_TRUE(absl::IsNotFound(store_->Get("new", DaemonCaller()).status()));
}

TEST_F(StoreFaultsTest, AFailedShmOpenOnAdoptionDropsThatComponentOnly) {
  const ComponentSnapshot a = Upload("a");
  Upload("b");
  const uint64_t each = pool_->Usage().reserved_bytes / 2;
  store_.reset();  // a crash: segments and manifest stay
  fs_.FailNth(FileOp::kShmOpen, EACCES);  // the first segment adopted: "a" (keys in order)
  Restart();
  EXPECT_EQ(store_->Stats().adopted, 1u);
  EXPECT_TRUE(absl::IsNotFound(store_->Get("a", DaemonCaller()).status()));
  EXPECT_TRUE(store_->Get("b", DaemonCaller()).ok());
  EXPECT_FALSE(std::filesystem::exists(SegmentPath(a.segment_name))) << "not left behind";
  EXPECT_EQ(pool_->Usage().segments, 1u);
  EXPECT_EQ(pool_->Usage().reserved_bytes, each);
  EXPECT_THAT(ManifestKeys(), ::testing::ElementsAre("b"));
}

TEST_F(StoreFaultsTest, ATruncatedSegmentIsDroppedOnAdoptionWithoutASigbus) {
  const ComponentSnapshot empty = Upload("empty");
  const ComponentSnapshot shorter = Upload("shorter");
  Upload("whole");
  const uint64_t each = pool_->Usage().reserved_bytes / 3;
  store_.reset();
  ASSERT_EQ(::truncate(SegmentPath(empty.segment_name).c_str(), 0), 0);
  ASSERT_EQ(::truncate(SegmentPath(shorter.segment_name).c_str(), 4096), 0);
  Restart();
  EXPECT_EQ(store_->Stats().adopted, 1u);
  EXPECT_TRUE(absl::IsNotFound(store_->Get("empty", DaemonCaller()).status()));
  EXPECT_TRUE(absl::IsNotFound(store_->Get("shorter", DaemonCaller()).status()));
  auto kept = store_->Get("whole", DaemonCaller());
  ASSERT_TRUE(kept.ok());
  EXPECT_FALSE(std::filesystem::exists(SegmentPath(empty.segment_name)));
  EXPECT_FALSE(std::filesystem::exists(SegmentPath(shorter.segment_name)));
  EXPECT_EQ(pool_->Usage().segments, 1u);
  EXPECT_EQ(pool_->Usage().reserved_bytes, each);
  EXPECT_THAT(ManifestKeys(), ::testing::ElementsAre("whole"));
}

TEST_F(StoreFaultsTest, AManifestThatCannotBeWrittenKeepsThePreviousOne) {
  Upload("a");
  for (FileOp op : {FileOp::kWrite, FileOp::kSync}) {
    fs_.FailAlways(op, op == FileOp::kWrite ? ENOSPC : EIO);
    Upload(op == FileOp::kWrite ? "b" : "c");  // served; only its warm restart suffers
    EXPECT_THAT(ManifestKeys(), ::testing::ElementsAre("a")) << "the old manifest, intact";
    EXPECT_FALSE(std::filesystem::exists(dir_.Join("manifest.json.tmp")));
    fs_.Heal();
  }
  Upload("d");
  EXPECT_THAT(ManifestKeys(), ::testing::ElementsAre("a", "b", "c", "d"));
  store_.reset();
  Restart();
  EXPECT_EQ(store_->Stats().adopted, 4u);
}

TEST_F(StoreFaultsTest, AShortReadFailsTheLoadNamingTheFile) {
  const std::string path = dir_.Join("model.safetensors");
  const uint64_t data_start = WriteSafetensors(path, 1 << 18);  // 2 x 1 MiB
  const PoolUsage before = pool_->Usage();
  fs_.TruncateReadsAt(data_start + kMiB + 100);  // the file seems to end inside "b"
  auto failed = store_->LoadSafetensors(lease_, RequestFor("m", path),
                                        [](uint64_t, uint64_t) {}, [] { return false; });
  ASSERT_FALSE(failed.ok());
  EXPECT_TRUE(absl::IsDataLoss(failed.status())) << failed.status();
  EXPECT_THAT(std::string(failed.status().message()),
              HasSubstr("model.safetensors shrank while reading"));
  EXPECT_TRUE(absl::IsNotFound(store_->Get("m", DaemonCaller()).status()));
  EXPECT_EQ(pool_->Usage().reserved_bytes, before.reserved_bytes);
  EXPECT_TRUE(pool_->ListSegmentNames().empty()) << "the partly written component is gone";
  fs_.Heal();
  auto loaded = store_->LoadSafetensors(lease_, RequestFor("m", path),
                                        [](uint64_t, uint64_t) {}, [] { return false; });
  EXPECT_TRUE(loaded.ok()) << loaded.status();
}

TEST_F(StoreFaultsTest, AReadErrorFailsTheLoadNamingTheFileAndTheErrno) {
  const std::string path = dir_.Join("model.safetensors");
  WriteSafetensors(path, 1 << 18);
  // Two reads validate the header (its length, then its text); the third reads tensor data.
  fs_.FailNth(FileOp::kRead, EIO, 3);
  auto failed = store_->LoadSafetensors(lease_, RequestFor("m", path),
                                        [](uint64_t, uint64_t) {}, [] { return false; });
  ASSERT_FALSE(failed.ok());
  EXPECT_TRUE(absl::IsInternal(failed.status())) << failed.status();
  EXPECT_THAT(std::string(failed.status().message()),
              HasSubstr("read model.safetensors at offset"));
  EXPECT_THAT(std::string(failed.status().message()), HasSubstr("Input/output error"));
  EXPECT_GE(fs_.Calls(FileOp::kRead), 3);
  EXPECT_TRUE(absl::IsNotFound(store_->Get("m", DaemonCaller()).status()));
  EXPECT_EQ(pool_->Usage().segments, 0u);
  EXPECT_TRUE(pool_->ListSegmentNames().empty());
}

// A load writes the segment through its descriptor: a write that fails (a /dev/shm that
// filled up meanwhile) fails the load with the segment's name, and leaves nothing behind.
TEST_F(StoreFaultsTest, AFailedWriteIntoTheSegmentFailsTheLoadAndLeavesNothing) {
  const std::string path = dir_.Join("model.safetensors");
  WriteSafetensors(path, 1 << 18);
  const PoolUsage before = pool_->Usage();
  fs_.FailNth(FileOp::kWrite, ENOSPC, 2);
  auto failed = store_->LoadSafetensors(lease_, RequestFor("m", path),
                                        [](uint64_t, uint64_t) {}, [] { return false; });
  ASSERT_FALSE(failed.ok());
  EXPECT_TRUE(absl::IsResourceExhausted(failed.status())) << failed.status();
  EXPECT_THAT(std::string(failed.status().message()), HasSubstr(pool_->name_prefix()));
  EXPECT_TRUE(absl::IsNotFound(store_->Get("m", DaemonCaller()).status()));
  EXPECT_EQ(pool_->Usage().reserved_bytes, before.reserved_bytes);
  EXPECT_TRUE(pool_->ListSegmentNames().empty());
  fs_.Heal();
  auto loaded = store_->LoadSafetensors(lease_, RequestFor("m", path),
                                        [](uint64_t, uint64_t) {}, [] { return false; });
  EXPECT_TRUE(loaded.ok()) << loaded.status();
}

TEST_F(StoreFaultsTest, AReadErrorInTheHeaderFailsBeforeAnySegmentIsMade) {
  const std::string path = dir_.Join("model.safetensors");
  WriteSafetensors(path, 16);
  fs_.FailNth(FileOp::kRead, EIO, 2);
  auto failed = store_->LoadSafetensors(lease_, RequestFor("m", path),
                                        [](uint64_t, uint64_t) {}, [] { return false; });
  ASSERT_FALSE(failed.ok());
  EXPECT_THAT(std::string(failed.status().message()),
              HasSubstr("read model.safetensors at offset 8: Input/output error"));
  EXPECT_EQ(fs_.Calls(FileOp::kShmOpen), 0);
}

}  // namespace
}  // namespace ddo
