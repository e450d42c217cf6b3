#include "daemon/store/component_store.h"

#include <map>
#include <memory>

#include <fcntl.h>

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "daemon/common/random_id.h"
#include "daemon/common/temp_dir_for_test.h"
#include "daemon/pool/shared_segment.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ddo {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kMiB = 1 << 20;

// A table of `count` bf16 tensors of `bytes` each, one unit per tensor.
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

class ComponentStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    pool_options_.budget_bytes = 6 * kMiB;  // three components of Upload's default size
    pool_options_.name_namespace = PoolNamespace(dir_.Join("sock"));
    Restart();
  }
  void TearDown() override {
    store_->Close(/*discard=*/true);
    store_.reset();
  }

  // A new pool and store over the same segments and manifest, as a restarted ddod.
  void Restart() {
    store_.reset();
    registry_ = std::make_unique<SessionRegistry>();
    pool_ = std::make_unique<HostPool>(pool_options_);
    store_ = std::make_unique<ComponentStore>(
        *pool_, *registry_, StoreOptions{dir_.Join("manifest.json"), 2});
    store_->AdoptPrevious();
  }

  // Registers, writes a recognisable pattern, commits.
  ComponentSnapshot Upload(const std::string& key, int tensors = 2, uint64_t bytes = kMiB,
                           const Lease* lease = nullptr) {
    const Lease& owner = lease != nullptr ? *lease : lease_;
    auto registered = store_->Register(owner, key, Table(tensors, bytes), "");
    EXPECT_TRUE(registered.ok()) << registered.status();
    EXPECT_FALSE(registered->warm_hit);
    Fill(registered->component, key);
    auto ready = store_->Commit(owner.id, registered->upload_id);
    EXPECT_TRUE(ready.ok()) << ready.status();
    return *ready;
  }

  // Writes through a second mapping, as a client does.
  static void Fill(const ComponentSnapshot& component, const std::string& pattern) {
    auto mapping = SharedSegment::Open(component.segment_name);
    ASSERT_TRUE(mapping.ok()) << mapping.status();
    for (const TensorEntry& tensor : component.tensors) {
      for (uint64_t i = 0; i < tensor.byte_size; ++i) {
        mapping->data()[tensor.offset + i] = pattern[i % pattern.size()];
      }
    }
  }

  static bool InShm(const std::string& name) {
    return std::filesystem::exists(SegmentPath(name));
  }

  TempDirForTest dir_;
  PoolOptions pool_options_;
  std::unique_ptr<SessionRegistry> registry_;  // a restarted ddod has a new one
  std::unique_ptr<HostPool> pool_;
  std::unique_ptr<ComponentStore> store_;
  Lease lease_{RandomId(), 1234, "test", absl::Now(), DaemonCaller()};
};

TEST_F(ComponentStoreTest, UploadCommitThenWarmHit) {
  const ComponentSnapshot ready = Upload("model-a");
  EXPECT_EQ(ready.state, ComponentState::kReady);
  EXPECT_EQ(ready.total_bytes, 2 * kMiB);
  EXPECT_EQ(ready.unit_count, 2u);
  EXPECT_EQ(store_->Stats().components, 1u);
  EXPECT_EQ(store_->Stats().used_bytes, 2 * kMiB);

  auto again = store_->Register(lease_, "model-a", Table(2, kMiB), "");
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->warm_hit);
  EXPECT_TRUE(again->upload_id.empty());
  EXPECT_EQ(again->component.segment_name, ready.segment_name);
  EXPECT_EQ(pool_->Usage().segments, 1u) << "no second copy";
}

TEST_F(ComponentStoreTest, NothingIsServedBeforeCommit) {
  auto registered = store_->Register(lease_, "model-a", Table(1, kMiB), "");
  ASSERT_TRUE(registered.ok());
  EXPECT_TRUE(absl::IsNotFound(store_->Get("model-a", DaemonCaller()).status()));
  EXPECT_TRUE(absl::IsNotFound(store_->AttachHost(lease_, "model-a").status()));
  Lease other{RandomId(), 99, "other", absl::Now(), DaemonCaller()};
  auto concurrent = store_->Register(other, "model-a", Table(1, kMiB), "");
  EXPECT_TRUE(absl::IsAborted(concurrent.status()));
  EXPECT_THAT(std::string(concurrent.status().message()), HasSubstr("pid 1234"));
  EXPECT_TRUE(absl::IsPermissionDenied(store_->Commit(other.id, registered->upload_id).status()));
}

TEST_F(ComponentStoreTest, AClientThatGoesAwayLosesItsUploadAndItsSpace) {
  auto registered = store_->Register(lease_, "model-a", Table(2, kMiB), "");
  ASSERT_TRUE(registered.ok());
  const std::string segment = registered->component.segment_name;
  EXPECT_TRUE(InShm(segment));
  store_->ReleaseLease(lease_.id);
  EXPECT_FALSE(InShm(segment));
  EXPECT_EQ(pool_->Usage().reserved_bytes, 0u);
  EXPECT_TRUE(absl::IsNotFound(store_->Get("model-a", DaemonCaller()).status()));
  EXPECT_FALSE(store_->Commit(lease_.id, registered->upload_id).ok());
}

TEST_F(ComponentStoreTest, ContentHashIsVerifiedAtCommit) {
  auto tensors = Table(1, kMiB);
  auto registered = store_->Register(lease_, "model-a", tensors, "xxh3-64:0000000000000000");
  ASSERT_TRUE(registered.ok());
  Fill(registered->component, "abc");
  auto wrong = store_->Commit(lease_.id, registered->upload_id);
  EXPECT_TRUE(absl::IsInvalidArgument(wrong.status()));
  EXPECT_THAT(std::string(wrong.status().message()), HasSubstr("content hash mismatch"));
  EXPECT_TRUE(absl::IsNotFound(store_->Get("model-a", DaemonCaller()).status()));
  EXPECT_EQ(pool_->Usage().reserved_bytes, 0u);

  auto malformed = store_->Register(lease_, "model-a", tensors, "md5:abc");
  EXPECT_TRUE(absl::IsInvalidArgument(malformed.status()));
  EXPECT_THAT(std::string(malformed.status().message()), HasSubstr("xxh3-64:"));

  // The right hash: computed over the same bytes.
  auto again = store_->Register(lease_, "model-a", tensors, "");
  ASSERT_TRUE(again.ok());
  Fill(again->component, "abc");
  auto mapping = SharedSegment::Open(again->component.segment_name);
  const std::string right = ContentHash(again->component.tensors, mapping->data());
  ASSERT_TRUE(store_->Abort(lease_.id, again->upload_id).ok());
  auto third = store_->Register(lease_, "model-a", tensors, right);
  Fill(third->component, "abc");
  EXPECT_TRUE(store_->Commit(lease_.id, third->upload_id).ok());
}

TEST_F(ComponentStoreTest, LeastRecentlyUsedUnusedComponentsAreEvictedFirst) {
  Upload("a");  // a 2 MiB segment each: three fit
  Upload("b");
  Upload("c");
  // Use "a" again, so "b" is now the least recently used.
  auto session = store_->AttachHost(lease_, "a");
  ASSERT_TRUE(store_->Detach(session->session_id, DaemonCaller()).ok());
  Upload("d");
  Upload("e");  // needs room again: "c" goes
  EXPECT_TRUE(absl::IsNotFound(store_->Get("b", DaemonCaller()).status()));
  EXPECT_TRUE(absl::IsNotFound(store_->Get("c", DaemonCaller()).status()));
  EXPECT_TRUE(store_->Get("a", DaemonCaller()).ok());
  EXPECT_TRUE(store_->Get("d", DaemonCaller()).ok());
  EXPECT_TRUE(store_->Get("e", DaemonCaller()).ok());
  EXPECT_EQ(store_->Stats().evictions, 2u);
}

TEST_F(ComponentStoreTest, KeepAliveEvictsOnlyWhatIsUnusedForLong) {
  Upload("idle");
  Upload("kept");
  Upload("used");
  ASSERT_TRUE(store_->SetKeepAlive("kept", lease_.caller, absl::InfiniteDuration()).ok());
  ASSERT_TRUE(store_->AttachHost(lease_, "used").ok());
  const uint64_t evictions = store_->Stats().evictions;
  // Not yet unused for a minute: nothing goes.
  EXPECT_TRUE(store_->EvictIdle(absl::Now(), absl::Minutes(1)).empty());
  // An hour later: the idle one goes; the one kept forever and the one in use stay.
  EXPECT_EQ(store_->EvictIdle(absl::Now() + absl::Hours(1), absl::Minutes(1)),
            std::vector<std::string>{"idle"});
  EXPECT_EQ(store_->Stats().evictions, evictions + 1);
  // ddod's default "never" evicts nothing.
  EXPECT_TRUE(store_->EvictIdle(absl::Now() + absl::Hours(1), absl::InfiniteDuration()).empty());
  std::vector<std::string> keys;
  for (const auto& component : store_->List(lease_.caller)) keys.push_back(component.cache_key);
  EXPECT_EQ(keys, (std::vector<std::string>{"kept", "used"}));
}

TEST_F(ComponentStoreTest, KeepAliveCountsFromTheLastUseOnTheStoresClock) {
  // The store's clock, moved by hand: no sleeping.
  auto now = std::make_shared<absl::Time>(absl::FromUnixSeconds(1700000000));
  store_->Close(/*discard=*/true);
  pool_ = std::make_unique<HostPool>(pool_options_);
  StoreOptions options{dir_.Join("manifest.json"), 2};
  options.clock = [now] { return *now; };
  store_ = std::make_unique<ComponentStore>(*pool_, *registry_, options);
  Upload("detached");
  Upload("idle");
  auto session = store_->AttachHost(lease_, "detached");
  ASSERT_TRUE(session.ok()) << session.status();
  *now += absl::Minutes(10);
  // A detach is a use: "detached" was last used now, "idle" ten minutes ago.
  ASSERT_TRUE(store_->Detach(session->session_id, DaemonCaller()).ok());
  EXPECT_EQ(store_->EvictIdle(*now + absl::Seconds(30), absl::Minutes(1)),
            std::vector<std::string>{"idle"});
  EXPECT_TRUE(store_->Get("detached", DaemonCaller()).ok());
  *now += absl::Minutes(2);
  EXPECT_EQ(store_->EvictIdle(*now, absl::Minutes(1)), std::vector<std::string>{"detached"});
}

TEST_F(ComponentStoreTest, AComponentsKeepAliveOutlivesARestart) {
  Upload("forever");
  Upload("brief");
  Upload("default");
  ASSERT_TRUE(store_->SetKeepAlive("forever", lease_.caller, absl::InfiniteDuration()).ok());
  ASSERT_TRUE(store_->SetKeepAlive("brief", lease_.caller, absl::Seconds(90)).ok());
  Restart();
  std::map<std::string, absl::Duration> kept;
  for (const auto& component : store_->List(lease_.caller)) {
    kept[component.cache_key] = component.keep_alive;
  }
  EXPECT_EQ(kept["forever"], absl::InfiniteDuration());
  EXPECT_EQ(kept["brief"], absl::Seconds(90));
  EXPECT_EQ(kept["default"], absl::ZeroDuration());
  // With ddod's default of a minute, two minutes later: only the one kept forever stays.
  EXPECT_EQ(store_->EvictIdle(absl::Now() + absl::Minutes(2), absl::Minutes(1)),
            (std::vector<std::string>{"brief", "default"}));
}

TEST_F(ComponentStoreTest, ComponentsInUseAreNeverEvicted) {
  Upload("a");
  Upload("b");
  auto a = store_->AttachHost(lease_, "a");
  auto b = store_->AttachHost(lease_, "b");
  Upload("c");
  auto c = store_->AttachHost(lease_, "c");
  auto too_big = store_->Register(lease_, "d", Table(2, kMiB), "");
  ASSERT_FALSE(too_big.ok());
  EXPECT_TRUE(absl::IsResourceExhausted(too_big.status()));
  EXPECT_THAT(std::string(too_big.status().message()), HasSubstr("'d' needs 2.0 MiB"));
  EXPECT_TRUE(store_->Get("a", DaemonCaller()).ok());
  EXPECT_TRUE(store_->Get("b", DaemonCaller()).ok());
  auto evict = store_->Evict("a", DaemonCaller());
  EXPECT_TRUE(absl::IsFailedPrecondition(evict.status()));
  // When the lease ends, its sessions end with it.
  store_->ReleaseLease(lease_.id);
  EXPECT_TRUE(store_->Evict("a", DaemonCaller()).ok());
  EXPECT_TRUE(absl::IsNotFound(store_->Evict("a", DaemonCaller()).status()));
}

TEST_F(ComponentStoreTest, ARequestLargerThanTheBudgetEvictsNothing) {
  Upload("a");
  auto huge = store_->Register(lease_, "huge", Table(10, kMiB), "");
  ASSERT_FALSE(huge.ok());
  EXPECT_TRUE(absl::IsResourceExhausted(huge.status()));
  EXPECT_THAT(std::string(huge.status().message()), HasSubstr("more than the whole budget"));
  EXPECT_TRUE(store_->Get("a", DaemonCaller()).ok());
  EXPECT_EQ(store_->Stats().evictions, 0u);
}

TEST_F(ComponentStoreTest, ADifferentStructureReplacesAnUnusedComponent) {
  const ComponentSnapshot first = Upload("model");
  auto session = store_->AttachHost(lease_, "model");
  auto blocked = store_->Register(lease_, "model", Table(3, kMiB / 2), "");
  EXPECT_TRUE(absl::IsFailedPrecondition(blocked.status()));
  ASSERT_TRUE(store_->Detach(session->session_id, DaemonCaller()).ok());
  session->bytes = ComponentBytes();  // an attachment's own reference to the bytes
  auto replaced = store_->Register(lease_, "model", Table(3, kMiB / 2), "");
  ASSERT_TRUE(replaced.ok()) << replaced.status();
  EXPECT_FALSE(replaced->warm_hit);
  EXPECT_FALSE(InShm(first.segment_name));
}

TEST_F(ComponentStoreTest, ARestartAdoptsReadyComponentsAndDropsUploads) {
  const ComponentSnapshot ready = Upload("kept");
  auto unfinished = store_->Register(lease_, "unfinished", Table(1, kMiB), "");
  ASSERT_TRUE(unfinished.ok());
  // A crash: the objects go away without Close (a SIGKILLed ddod runs no code at all; here
  // the segments stay because nothing marks them discarded).
  Restart();
  EXPECT_EQ(store_->Stats().adopted, 1u);
  auto adopted = store_->Get("kept", DaemonCaller());
  ASSERT_TRUE(adopted.ok());
  EXPECT_EQ(adopted->segment_name, ready.segment_name);
  auto mapping = SharedSegment::Open(adopted->segment_name);
  EXPECT_EQ(std::string(mapping->data() + adopted->tensors[0].offset, 4), "kept");
  EXPECT_TRUE(absl::IsNotFound(store_->Get("unfinished", DaemonCaller()).status()));
  EXPECT_FALSE(InShm(unfinished->component.segment_name)) << "leftover upload removed";
  auto warm = store_->Register(lease_, "kept", Table(2, kMiB), "");
  EXPECT_TRUE(warm->warm_hit);
}

TEST_F(ComponentStoreTest, ATruncatedSegmentIsNotAdopted) {
  const ComponentSnapshot ready = Upload("kept");
  const ComponentSnapshot other = Upload("other");
  store_.reset();  // crash-like: manifest and segments stay
  ASSERT_EQ(::truncate(SegmentPath(ready.segment_name).c_str(), kMiB), 0);
  Restart();
  EXPECT_TRUE(absl::IsNotFound(store_->Get("kept", DaemonCaller()).status()));
  EXPECT_FALSE(InShm(ready.segment_name));
  EXPECT_TRUE(store_->Get("other", DaemonCaller()).ok());
}

TEST_F(ComponentStoreTest, ACorruptManifestDiscardsThePool) {
  const ComponentSnapshot ready = Upload("kept");
  store_.reset();
  std::ofstream(dir_.Join("manifest.json"), std::ios::app) << "garbage";
  Restart();
  EXPECT_TRUE(absl::IsNotFound(store_->Get("kept", DaemonCaller()).status()));
  EXPECT_FALSE(InShm(ready.segment_name));
  EXPECT_EQ(pool_->Usage().reserved_bytes, 0u);
}

TEST_F(ComponentStoreTest, CloseWithDiscardLeavesNothing) {
  const ComponentSnapshot ready = Upload("a");
  store_->Close(/*discard=*/true);
  EXPECT_FALSE(InShm(ready.segment_name));
  EXPECT_FALSE(std::filesystem::exists(dir_.Join("manifest.json")));
  EXPECT_TRUE(pool_->ListSegmentNames().empty());
}

// Two users of a shared ddod: neither is an admin.
Lease LeaseOf(uid_t uid) {
  return Lease{RandomId(), 10 + static_cast<int64_t>(uid), "user", absl::Now(),
               CallerFromCredentials(uid, uid, 10 + static_cast<pid_t>(uid))};
}

TEST_F(ComponentStoreTest, AnotherUsersComponentIsInvisibleAndUntouchable) {
  const uid_t victim_uid = ::geteuid() == 5001 ? 5003 : 5001;
  const uid_t attacker_uid = ::geteuid() == 5002 ? 5004 : 5002;
  const Lease victim = LeaseOf(victim_uid);
  const Lease attacker = LeaseOf(attacker_uid);
  const ComponentSnapshot ready = Upload("victim/model", 2, kMiB, &victim);
  EXPECT_EQ(ready.owner_uid, victim_uid);

  // Not listed, not found, not attachable, not evictable: as if it were not there.
  EXPECT_TRUE(store_->List(attacker.caller).empty());
  EXPECT_EQ(store_->List(victim.caller).size(), 1u);
  EXPECT_TRUE(absl::IsNotFound(store_->Get("victim/model", attacker.caller).status()));
  EXPECT_TRUE(absl::IsNotFound(store_->AttachHost(attacker, "victim/model").status()));
  EXPECT_TRUE(absl::IsNotFound(store_->Evict("victim/model", attacker.caller).status()));
  // Same table under the same key: the attacker's own entry (keys are names inside their
  // uid), never a warm hit with the victim's bytes, never a replacement of them.
  auto same = store_->Register(attacker, "victim/model", Table(2, kMiB), "");
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_FALSE(same->warm_hit);
  EXPECT_NE(same->component.segment_name, ready.segment_name);
  ASSERT_TRUE(store_->Commit(attacker.id, same->upload_id).ok());
  auto kept = store_->Get("victim/model", victim.caller);
  ASSERT_TRUE(kept.ok());
  EXPECT_EQ(kept->segment_name, ready.segment_name);
  // An admin neither reads nor hits it: its key is its own name too.
  EXPECT_TRUE(absl::IsNotFound(store_->Get("victim/model", DaemonCaller()).status()));
  auto admins = store_->Register(lease_, "victim/model", Table(2, kMiB), "");
  ASSERT_TRUE(admins.ok()) << admins.status();
  EXPECT_FALSE(admins->warm_hit);
  ASSERT_TRUE(store_->Abort(lease_.id, admins->upload_id).ok());
  // It lists everyone's and evicts naming the owner; nobody else may name one.
  EXPECT_EQ(store_->List(DaemonCaller()).size(), 2u);
  EXPECT_TRUE(absl::IsPermissionDenied(
      store_->Evict("victim/model", attacker.caller, victim_uid).status()));
  EXPECT_TRUE(store_->Evict("victim/model", DaemonCaller(), attacker_uid).ok());
  EXPECT_TRUE(store_->Get("victim/model", victim.caller).ok());
}

TEST_F(ComponentStoreTest, ASessionIsDetachedOnlyByItsUser) {
  const Lease victim = LeaseOf(5001);
  const Lease attacker = LeaseOf(5002);
  Upload("victim/model", 2, kMiB, &victim);
  auto attached = store_->AttachHost(victim, "victim/model");
  ASSERT_TRUE(attached.ok());
  EXPECT_TRUE(absl::IsPermissionDenied(store_->Detach(attached->session_id, attacker.caller)));
  EXPECT_TRUE(absl::IsPermissionDenied(
      registry_->FindFor(attached->session_id, attacker.caller).status()));
  EXPECT_EQ(store_->Get("victim/model", victim.caller)->sessions, 1u);
  EXPECT_TRUE(store_->Detach(attached->session_id, victim.caller).ok());
  EXPECT_EQ(store_->Get("victim/model", victim.caller)->sessions, 0u);
  EXPECT_EQ(registry_->size(), 0u);
  EXPECT_TRUE(absl::IsNotFound(store_->Detach(attached->session_id, victim.caller)));
}

TEST_F(ComponentStoreTest, AnUploadFromMemoryIsNeverShared) {
  const Lease owner = LeaseOf(5001);
  const Lease reader = LeaseOf(5002);
  auto registered = store_->Register(owner, "shared/model", Table(2, kMiB), "");
  ASSERT_TRUE(registered.ok());
  ASSERT_TRUE(store_->Commit(owner.id, registered->upload_id).ok());
  // An upload from memory proves nothing: the reader's registration is its own upload.
  auto theirs = store_->Register(reader, "shared/model", Table(2, kMiB), "");
  ASSERT_TRUE(theirs.ok()) << theirs.status();
  EXPECT_FALSE(theirs->warm_hit);
  EXPECT_EQ(theirs->component.owner_uid, reader.caller.uid);
}

TEST_F(ComponentStoreTest, UploadsPerUserAreBoundedAndTheLimitIsNamed) {
  pool_options_.budget_bytes = 64 * kMiB;
  store_->Close(true);
  pool_ = std::make_unique<HostPool>(pool_options_);
  StoreOptions options{dir_.Join("manifest.json"), 2};
  options.max_uploads_per_uid = 2;
  options.max_bytes_per_uid = 6 * kMiB;
  store_ = std::make_unique<ComponentStore>(*pool_, *registry_, options);
  const Lease user = LeaseOf(5001);
  ASSERT_TRUE(store_->Register(user, "a", Table(1, kMiB), "").ok());
  ASSERT_TRUE(store_->Register(user, "b", Table(1, kMiB), "").ok());
  auto third = store_->Register(user, "c", Table(1, kMiB), "");
  EXPECT_TRUE(absl::IsResourceExhausted(third.status()));
  EXPECT_THAT(std::string(third.status().message()), HasSubstr("limit per user (2"));
  // Another user is not affected; its bytes are bounded too.
  const Lease other = LeaseOf(5002);
  auto big = store_->Register(other, "big", Table(1, 8 * kMiB), "");
  EXPECT_TRUE(absl::IsResourceExhausted(big.status()));
  EXPECT_THAT(std::string(big.status().message()), HasSubstr("limit per user"));
  EXPECT_TRUE(store_->Register(other, "small", Table(1, kMiB), "").ok());
}

// A one-tensor safetensors file: 4 floats, every byte `fill`.
void WriteSmallSafetensors(const std::string& path, char fill = '\x11') {
  std::string header = R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})";
  header.resize((header.size() + 7) / 8 * 8, ' ');
  std::string bytes(8, '\0');
  const uint64_t length = header.size();
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((length >> (8 * i)) & 0xff);
  bytes += header;
  bytes += std::string(16, fill);
  std::FILE* file = std::fopen(path.c_str(), "wb");
  ASSERT_NE(file, nullptr);
  std::fwrite(bytes.data(), 1, bytes.size(), file);
  std::fclose(file);
}

// The request a client makes with a descriptor it opened itself.
SafetensorsRequest RequestFor(const std::string& key, const std::string& path) {
  SafetensorsRequest request;
  request.cache_key = key;
  request.files.push_back(SafetensorsSource{"model.safetensors",
                                            UniqueFd(::open(path.c_str(), O_RDONLY | O_CLOEXEC))});
  return request;
}

TEST_F(ComponentStoreTest, FilesWithTheSameBytesShareOneCopyOtherBytesDoNot) {
  const Lease owner = LeaseOf(5001);
  const Lease copier = LeaseOf(5002);
  const Lease forger = LeaseOf(5003);
  const Lease same_file = LeaseOf(5004);
  const std::string path = dir_.Join("model.safetensors");
  const std::string copy = dir_.Join("copy.safetensors");
  const std::string forged = dir_.Join("forged.safetensors");
  WriteSmallSafetensors(path);
  WriteSmallSafetensors(copy);
  WriteSmallSafetensors(forged, '\x22');
  auto none = [] { return false; };
  auto quiet = [](uint64_t, uint64_t) {};
  auto loaded = store_->LoadSafetensors(owner, RequestFor("m", path), quiet, none);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_FALSE(loaded->warm_hit);

  // Another file, other bytes, same structure: no proof; the forger's own copy.
  auto from_forged = store_->LoadSafetensors(forger, RequestFor("m", forged), quiet, none);
  ASSERT_TRUE(from_forged.ok()) << from_forged.status();
  EXPECT_FALSE(from_forged->warm_hit);
  EXPECT_NE(from_forged->component.segment_name, loaded->component.segment_name);

  // Another file with the same bytes: its content hash proves them; one copy, shared.
  auto from_copy = store_->LoadSafetensors(copier, RequestFor("m", copy), quiet, none);
  ASSERT_TRUE(from_copy.ok()) << from_copy.status();
  EXPECT_TRUE(from_copy->warm_hit);
  EXPECT_EQ(from_copy->component.segment_name, loaded->component.segment_name);
  EXPECT_EQ(from_copy->component.owner_uid, copier.caller.uid);
  EXPECT_EQ(pool_->Usage().segments, 2u);  // the owner's (shared) and the forger's
  EXPECT_EQ(store_->List(copier.caller).size(), 1u);
  auto attached = store_->AttachHost(copier, "m");
  ASSERT_TRUE(attached.ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(store_->Evict("m", copier.caller).status()));
  ASSERT_TRUE(store_->Detach(attached->session_id, copier.caller).ok());

  // The very file: the same content proof (its identity only says what to compare with).
  auto proved = store_->LoadSafetensors(same_file, RequestFor("m", path), quiet, none);
  ASSERT_TRUE(proved.ok()) << proved.status();
  EXPECT_TRUE(proved->warm_hit);

  // Keep-alives are each entry's own: the copier's second does not touch the owner's.
  EXPECT_TRUE(store_->SetKeepAlive("m", copier.caller, absl::Seconds(1)).ok());
  EXPECT_TRUE(store_->SetKeepAlive("m", owner.caller, absl::InfiniteDuration()).ok());
  // The copier evicts its entry; the owner's and its bytes stay.
  auto freed = store_->Evict("m", copier.caller);
  ASSERT_TRUE(freed.ok()) << freed.status();
  EXPECT_EQ(*freed, 0u);
  EXPECT_EQ(store_->Get("m", owner.caller)->segment_name, loaded->component.segment_name);

  // The owner's file rewritten with other bytes proves nothing for a newcomer.
  const Lease newcomer = LeaseOf(5005);
  WriteSmallSafetensors(path, '\x33');
  auto changed = store_->LoadSafetensors(newcomer, RequestFor("m", path), quiet, none);
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_FALSE(changed->warm_hit);
  EXPECT_NE(changed->component.segment_name, loaded->component.segment_name);
}

TEST_F(ComponentStoreTest, TheUserLimitCountsMappedSegmentsAndTableHeap) {
  pool_options_.budget_bytes = 64 * kMiB;
  store_->Close(true);
  pool_ = std::make_unique<HostPool>(pool_options_);
  StoreOptions options{dir_.Join("manifest.json"), 2};
  options.max_bytes_per_uid = 16 * kMiB;
  store_ = std::make_unique<ComponentStore>(*pool_, *registry_, options);
  const Lease user = LeaseOf(5001);
  // 1000 two-byte tensors, each its own unit: 2000 bytes of tensors, 4 MiB of segment.
  absl::Status refused;
  int kept = 0;
  for (int i = 0; i < 8 && refused.ok(); ++i) {
    auto registered = store_->Register(user, "tiny-" + std::to_string(i), Table(1000, 2), "");
    refused = registered.status();
    if (!registered.ok()) break;
    ASSERT_TRUE(store_->Commit(user.id, registered->upload_id).ok());
    ++kept;
  }
  EXPECT_TRUE(absl::IsResourceExhausted(refused)) << refused;
  EXPECT_THAT(std::string(refused.message()), HasSubstr("--max-user-pool-gb"));
  EXPECT_GT(kept, 0);
  EXPECT_LE(pool_->Usage().reserved_bytes, 16 * kMiB);
  EXPECT_EQ(store_->Stats().used_bytes, pool_->Usage().reserved_bytes);
  EXPECT_EQ(store_->Stats().used_bytes, static_cast<uint64_t>(kept) * 4 * kMiB);
}

TEST_F(ComponentStoreTest, ACommittedUploadIsACopyTheUploaderCannotWrite) {
  auto registered = store_->Register(lease_, "m", Table(2, kMiB), "");
  ASSERT_TRUE(registered.ok());
  Fill(registered->component, "genuine");
  // The uploader keeps its mapping past the commit.
  auto uploaders = SharedSegment::Open(registered->component.segment_name);
  ASSERT_TRUE(uploaders.ok());
  auto ready = store_->Commit(lease_.id, registered->upload_id);
  ASSERT_TRUE(ready.ok()) << ready.status();
  EXPECT_NE(ready->segment_name, registered->component.segment_name);
  EXPECT_FALSE(InShm(registered->component.segment_name));
  struct stat info {};
  ASSERT_EQ(::stat(SegmentPath(ready->segment_name).c_str(), &info), 0);
  auto served = SharedSegment::Open(ready->segment_name);
  ASSERT_TRUE(served.ok());
  EXPECT_EQ(std::string(served->data(), 7), "genuine");
  // The upload segment was truncated: its pages are gone (a touch would fault).
  struct stat gone {};
  EXPECT_NE(::stat(SegmentPath(registered->component.segment_name).c_str(), &gone), 0);
}

TEST_F(ComponentStoreTest, ALoadWhoseLeaseEndsIsNotCommitted) {
  const std::string path = dir_.Join("model.safetensors");
  WriteSmallSafetensors(path);
  auto ended = [] { return true; };
  auto result =
      store_->LoadSafetensors(lease_, RequestFor("m", path), [](uint64_t, uint64_t) {}, ended);
  EXPECT_FALSE(result.ok());
  EXPECT_TRUE(absl::IsNotFound(store_->Get("m", DaemonCaller()).status()));
  EXPECT_EQ(pool_->Usage().segments, 0u);
}

TEST_F(ComponentStoreTest, DiscardUnusedUndoesOnlyThatCommitAndNothingInUse) {
  const ComponentSnapshot first = Upload("a");
  const uid_t uid = DaemonCaller().uid;
  store_->DiscardUnused(uid, "a", "/not-its-segment");  // another segment: left alone
  EXPECT_TRUE(store_->Get("a", DaemonCaller()).ok());
  auto attached = store_->AttachHost(lease_, "a");
  ASSERT_TRUE(attached.ok());
  store_->DiscardUnused(uid, "a", first.segment_name);  // in use: left alone
  EXPECT_TRUE(store_->Get("a", DaemonCaller()).ok());
  ASSERT_TRUE(store_->Detach(attached->session_id, DaemonCaller()).ok());
  store_->DiscardUnused(uid + 1, "a", first.segment_name);  // another uid's name: not it
  EXPECT_TRUE(store_->Get("a", DaemonCaller()).ok());
  store_->DiscardUnused(uid, "a", first.segment_name);
  EXPECT_TRUE(absl::IsNotFound(store_->Get("a", DaemonCaller()).status()));
}

}  // namespace
}  // namespace ddo
