// Tests of sharing a component between users by proof (docs/security.md, "Ownership and
// sharing"): a user whose own files hold the same bytes as another user's component reads that
// component. The proof must not be forgeable: XXH3-64 collisions are cheap to build, so two
// files that differ but have the same XXH3 content hash must not count as the same bytes.
#include <fcntl.h>
#include <unistd.h>
#include <xxhash.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "daemon/common/random_id.h"
#include "daemon/common/temp_dir_for_test.h"
#include "daemon/pool/shared_segment.h"
#include "daemon/store/component_store.h"
#include "daemon/store/safetensors_hash.h"
#include "gtest/gtest.h"

namespace ddo {
namespace {

constexpr uint64_t kMiB = 1 << 20;
constexpr uint64_t kPayloadBytes = 4096;  // one F32 tensor of 1024 elements

void PutLE32(std::string& bytes, size_t at, uint32_t value) {
  for (int i = 0; i < 4; ++i) bytes[at + i] = static_cast<char>((value >> (8 * i)) & 0xff);
}

uint32_t LowWordOfDefaultSecret(size_t offset) {
  // The first 16 bytes of XXH3's default secret (XXH3_kSecret in xxhash.h, 0.8.x).
  static constexpr unsigned char kSecretStart[16] = {0xb8, 0xfe, 0x6c, 0x39, 0x23, 0xa4,
                                                     0x4b, 0xbe, 0x7c, 0x01, 0x81, 0x2c,
                                                     0xf7, 0x21, 0xad, 0x1c};
  uint32_t value = 0;
  for (int i = 3; i >= 0; --i) value = (value << 8) | kSecretStart[offset + i];
  return value;
}

// Two different payloads with the same XXH3-64. Past 240 bytes XXH3 runs, per 64-byte stripe
// n and 8-byte lane i, acc[i^1] += w and acc[i] += lo32(w ^ s) * hi32(w ^ s), where s is the
// secret's word at byte 8 * (n + i). A word whose low half equals the secret word's low half
// makes the product 0, so the stripe only adds w itself. Lane 0 of stripes 0 and 1 gets such
// words; exchanging their high halves between the payloads keeps every lane's sum, hence every
// accumulator, hence the hash. The rest of the payload (zeros) is the same in both.
std::pair<std::string, std::string> XxhCollidingPayloads() {
  std::string genuine(kPayloadBytes, '\0');
  std::string forged(kPayloadBytes, '\0');
  for (std::string* payload : {&genuine, &forged}) {
    PutLE32(*payload, 0, LowWordOfDefaultSecret(0));   // stripe 0, lane 0: secret word 0
    PutLE32(*payload, 64, LowWordOfDefaultSecret(8));  // stripe 1, lane 0: secret word 1
  }
  PutLE32(genuine, 4, 0x11111111);
  PutLE32(genuine, 68, 0x22222222);
  PutLE32(forged, 4, 0x22222222);
  PutLE32(forged, 68, 0x11111111);
  return {genuine, forged};
}

// The table LoadSafetensors makes of WriteSafetensors's file.
std::vector<TensorEntry> TableOfOneTensor() {
  TensorEntry tensor;
  tensor.name = "w";
  tensor.dtype = DType::kF32;
  tensor.shape = {static_cast<int64_t>(kPayloadBytes / 4)};
  tensor.byte_size = kPayloadBytes;
  return {tensor};
}

// A safetensors file of one F32 tensor "w" holding `payload`.
void WriteSafetensors(const std::string& path, const std::string& payload) {
  std::string header = "{\"w\":{\"dtype\":\"F32\",\"shape\":[" +
                       std::to_string(payload.size() / 4) + "],\"data_offsets\":[0," +
                       std::to_string(payload.size()) + "]}}";
  header.resize((header.size() + 7) / 8 * 8, ' ');
  std::string bytes(8, '\0');
  const uint64_t length = header.size();
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((length >> (8 * i)) & 0xff);
  bytes += header;
  bytes += payload;
  std::FILE* file = std::fopen(path.c_str(), "wb");
  ASSERT_NE(file, nullptr);
  ASSERT_EQ(std::fwrite(bytes.data(), 1, bytes.size(), file), bytes.size());
  ASSERT_EQ(std::fclose(file), 0);
}

SafetensorsRequest RequestFor(const std::string& key, const std::string& path) {
  SafetensorsRequest request;
  request.cache_key = key;
  request.files.push_back(SafetensorsSource{"model.safetensors",
                                            UniqueFd(::open(path.c_str(), O_RDONLY | O_CLOEXEC))});
  return request;
}

// A user of a shared ddod, not an admin.
Lease LeaseOf(uid_t uid) {
  return Lease{RandomId(), 10 + static_cast<int64_t>(uid), "user", absl::Now(),
               CallerFromCredentials(uid, uid, 10 + static_cast<pid_t>(uid))};
}

// The bytes of tensor "w" of a component, read through a mapping of its segment.
std::string PayloadOf(const ComponentSnapshot& component) {
  auto mapping = SharedSegment::Open(component.segment_name);
  if (!mapping.ok()) return "";
  return std::string(mapping->data() + component.tensors.at(0).offset, kPayloadBytes);
}

class SharingProofTest : public ::testing::Test {
 protected:
  void SetUp() override {
    pool_options_.budget_bytes = 8 * kMiB;
    pool_options_.name_namespace = PoolNamespace(dir_.Join("sock"));
    pool_ = std::make_unique<HostPool>(pool_options_);
    store_ = std::make_unique<ComponentStore>(*pool_, registry_, StoreOptions{dir_.Join("manifest.json"), 2});
  }
  void TearDown() override {
    store_->Close(/*discard=*/true);
    store_.reset();
  }

  absl::StatusOr<LoadResult> Load(const Lease& lease, const std::string& key,
                                  const std::string& path) {
    return store_->LoadSafetensors(
        lease, RequestFor(key, path), [](uint64_t, uint64_t) {}, [] { return false; });
  }

  TempDirForTest dir_;
  PoolOptions pool_options_;
  SessionRegistry registry_;  // outlives the store
  std::unique_ptr<HostPool> pool_;
  std::unique_ptr<ComponentStore> store_;
};

TEST(Sha256HasherTest, GivesTheStandardDigestInAnySplit) {
  // FIPS 180-2, appendix B.1.
  const std::string expected =
      "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
  Sha256Hasher whole;
  whole.Update("abc", 3);
  EXPECT_EQ(whole.Digest(), expected);
  Sha256Hasher pieces;
  pieces.Update("a", 1);
  pieces.Update("", 0);
  pieces.Update("bc", 2);
  EXPECT_EQ(pieces.Digest(), expected);
}

TEST_F(SharingProofTest, TheFilesDigestsCoverTheTensorBytesAndCanBeCancelled) {
  const auto [genuine, forged] = XxhCollidingPayloads();
  const std::string genuine_path = dir_.Join("genuine.safetensors");
  const std::string forged_path = dir_.Join("forged.safetensors");
  WriteSafetensors(genuine_path, genuine);
  WriteSafetensors(forged_path, forged);
  auto hash = [](const std::string& path, const std::function<bool()>& cancelled) {
    SafetensorsRequest request = RequestFor("k", path);
    auto set = OpenSafetensorsSet(std::move(request.files), std::nullopt);
    EXPECT_TRUE(set.ok()) << set.status();
    return HashSafetensors(*set, cancelled);
  };
  auto of_genuine = hash(genuine_path, [] { return false; });
  auto of_forged = hash(forged_path, [] { return false; });
  ASSERT_TRUE(of_genuine.ok()) << of_genuine.status();
  ASSERT_TRUE(of_forged.ok()) << of_forged.status();
  // Only the tensor bytes (not the header): the same stream as the content hash.
  Sha256Hasher expected;
  expected.Update(genuine.data(), genuine.size());
  EXPECT_EQ(of_genuine->proof_digest, expected.Digest());
  EXPECT_EQ(of_genuine->content_hash, ContentHash(TableOfOneTensor(), genuine.data()));
  // XXH3 cannot tell these files apart; SHA-256 does.
  EXPECT_EQ(of_genuine->content_hash, of_forged->content_hash);
  EXPECT_NE(of_genuine->proof_digest, of_forged->proof_digest);
  EXPECT_TRUE(absl::IsCancelled(hash(genuine_path, [] { return true; }).status()));
}

TEST_F(SharingProofTest, TheCollidingPayloadsDifferButHaveTheSameXxh3ContentHash) {
  const auto [genuine, forged] = XxhCollidingPayloads();
  ASSERT_NE(genuine, forged);
  EXPECT_EQ(XXH3_64bits(genuine.data(), genuine.size()),
            XXH3_64bits(forged.data(), forged.size()));
  // The project's own content hash (what the proof compared before it used SHA-256).
  EXPECT_EQ(ContentHash(TableOfOneTensor(), genuine.data()),
            ContentHash(TableOfOneTensor(), forged.data()));
}

// The attack: user A loads crafted files whose XXH3 content hash is that of a popular model's
// files; user B then loads the genuine files under the same key. B must not be served A's
// bytes (nor be made a reader of A's component).
TEST_F(SharingProofTest, FilesWithTheSameXxh3ButOtherBytesDoNotProveTheBytes) {
  const auto [genuine, forged] = XxhCollidingPayloads();
  const std::string forged_path = dir_.Join("forged.safetensors");
  const std::string genuine_path = dir_.Join("genuine.safetensors");
  WriteSafetensors(forged_path, forged);
  WriteSafetensors(genuine_path, genuine);
  const Lease attacker = LeaseOf(5001);
  const Lease victim = LeaseOf(5002);

  auto planted = Load(attacker, "popular/model", forged_path);
  ASSERT_TRUE(planted.ok()) << planted.status();
  ASSERT_TRUE(PayloadOf(planted->component) == forged);

  // The victim's files prove nothing about the attacker's copy: its load is its own.
  auto served = Load(victim, "popular/model", genuine_path);
  ASSERT_TRUE(served.ok()) << served.status();
  EXPECT_FALSE(served->warm_hit);
  EXPECT_NE(served->component.segment_name, planted->component.segment_name)
      << "the victim was served the attacker's component";
  EXPECT_TRUE(PayloadOf(served->component) == genuine) << "the victim was served other bytes";
}

// The proof still works for the same bytes: a copy of the crafted file proves them.
TEST_F(SharingProofTest, AnotherFileWithTheSameBytesStillProvesThem) {
  const std::string forged = XxhCollidingPayloads().second;
  const std::string path = dir_.Join("model.safetensors");
  const std::string copy = dir_.Join("copy.safetensors");
  WriteSafetensors(path, forged);
  WriteSafetensors(copy, forged);
  const Lease owner = LeaseOf(5001);
  auto loaded = Load(owner, "m", path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  for (int attempt = 0; attempt < 2; ++attempt) {  // the second finds the digest computed
    const Lease reader = LeaseOf(5002 + attempt);
    auto shared = Load(reader, "m", copy);
    ASSERT_TRUE(shared.ok()) << shared.status();
    EXPECT_TRUE(shared->warm_hit);
    EXPECT_EQ(shared->component.segment_name, loaded->component.segment_name);
    EXPECT_EQ(shared->component.owner_uid, reader.caller.uid);  // its own entry
    EXPECT_TRUE(store_->MayRead("m", reader.caller));
  }
  EXPECT_EQ(pool_->Usage().segments, 1u);
}

// docs/security.md: an upload from memory is never shared, even with a caller whose files
// hold exactly its bytes (ddod never read them from a file; only files are proof).
TEST_F(SharingProofTest, AnUploadFromMemoryIsNotSharedWithFilesOfTheSameBytes) {
  const std::string genuine = XxhCollidingPayloads().first;
  const Lease owner = LeaseOf(5001);
  const Lease reader = LeaseOf(5002);
  auto registered = store_->Register(owner, "uploaded/model", TableOfOneTensor(), "");
  ASSERT_TRUE(registered.ok()) << registered.status();
  {
    auto mapping = SharedSegment::Open(registered->component.segment_name);
    ASSERT_TRUE(mapping.ok()) << mapping.status();
    std::memcpy(mapping->data() + registered->component.tensors.at(0).offset, genuine.data(),
                genuine.size());
  }
  auto committed = store_->Commit(owner.id, registered->upload_id);
  ASSERT_TRUE(committed.ok()) << committed.status();
  ASSERT_TRUE(PayloadOf(*committed) == genuine);

  const std::string path = dir_.Join("model.safetensors");
  WriteSafetensors(path, genuine);
  auto loaded = Load(reader, "uploaded/model", path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_FALSE(loaded->warm_hit);
  EXPECT_NE(loaded->component.segment_name, committed->segment_name);
}

}  // namespace
}  // namespace ddo
