// Derived versions of a component (RegisterDerived): only the changed tensors stored anew, the
// others shared with the base's bytes, with real shared memory, a real manifest across
// restarts, and streaming sessions of the host backend.
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "daemon/common/random_id.h"
#include "daemon/common/temp_dir_for_test.h"
#include "daemon/pool/shared_segment.h"
#include "daemon/service/component_proto.h"
#include "daemon/service/stream_opener.h"
#include "daemon/store/component_store.h"
#include "daemon/stream/stream_sessions.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ddo {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kMiB = 1 << 20;

// `count` Linear weights of 1 MiB (bf16, 512 x 1024), one unit each.
std::vector<TensorEntry> Table(int count) {
  std::vector<TensorEntry> tensors;
  for (int i = 0; i < count; ++i) {
    TensorEntry tensor;
    tensor.name = "blocks." + std::to_string(i) + ".weight";
    tensor.dtype = DType::kBF16;
    tensor.shape = {512, 1024};
    tensor.byte_size = kMiB;
    tensor.module_path = "blocks." + std::to_string(i);
    tensor.module_class = "Linear";
    tensor.unit = static_cast<uint32_t>(i);
    tensors.push_back(tensor);
  }
  return tensors;
}

// The bytes a tensor holds in a version: a pattern of the version's tag and the tensor's name.
std::string Bytes(const std::string& tag, const TensorEntry& tensor) {
  const std::string pattern = tag + "|" + tensor.name + "|";
  std::string bytes(tensor.byte_size, '\0');
  for (uint64_t i = 0; i < bytes.size(); ++i) bytes[i] = pattern[i % pattern.size()];
  return bytes;
}

// The content hash of `changed` (names) with `tag`'s bytes, in table order.
std::string HashOf(const std::vector<TensorEntry>& table, const std::set<std::string>& changed,
                   const std::string& tag) {
  ContentHasher hasher;
  for (const TensorEntry& tensor : table) {
    if (changed.count(tensor.name) == 0) continue;
    const std::string bytes = Bytes(tag, tensor);
    hasher.Update(bytes.data(), bytes.size());
  }
  return hasher.Digest();
}

Lease LeaseOf(uid_t uid) {
  return Lease{RandomId(), 10 + static_cast<int64_t>(uid), "user", absl::Now(),
               CallerFromCredentials(uid, uid, 10 + static_cast<pid_t>(uid))};
}

class DerivedComponentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    pool_options_.budget_bytes = 16 * kMiB;
    pool_options_.name_namespace = PoolNamespace(dir_.Join("sock"));
    Restart();
  }
  void TearDown() override {
    store_->Close(/*discard=*/true);
    store_.reset();
  }

  void Restart() {
    store_.reset();
    pool_ = std::make_unique<HostPool>(pool_options_);
    store_ = std::make_unique<ComponentStore>(*pool_, registry_, StoreOptions{dir_.Join("manifest.json"), 2});
    store_->AdoptPrevious();
  }

  // Writes `tag`'s bytes of the tensors an upload placed in the component's own segment,
  // through a second mapping of the segment the response names, as a client does.
  static void Fill(const ComponentSnapshot& component, const std::string& tag) {
    auto mapping = SharedSegment::Open(component.segment_name);
    ASSERT_TRUE(mapping.ok()) << mapping.status();
    for (const TensorEntry& tensor : component.tensors) {
      if (tensor.segment != 0) continue;
      const std::string bytes = Bytes(tag, tensor);
      std::memcpy(mapping->data() + tensor.offset, bytes.data(), bytes.size());
    }
  }

  ComponentSnapshot UploadBase(const std::string& key, int count = 4,
                               const Lease* lease = nullptr) {
    const Lease& owner = lease != nullptr ? *lease : lease_;
    auto registered = store_->Register(owner, key, Table(count), "");
    EXPECT_TRUE(registered.ok()) << registered.status();
    Fill(registered->component, key);
    auto ready = store_->Commit(owner.id, registered->upload_id);
    EXPECT_TRUE(ready.ok()) << ready.status();
    return *ready;
  }

  absl::StatusOr<RegisterResult> Register(const std::string& key, const std::string& base,
                                          const std::set<std::string>& changed,
                                          const std::string& tag, const Lease* lease = nullptr) {
    DerivedRequest request;
    request.cache_key = key;
    request.base_cache_key = base;
    request.changed_tensors.assign(changed.begin(), changed.end());
    request.content_hash = HashOf(Table(4), changed, tag);
    return store_->RegisterDerived(lease != nullptr ? *lease : lease_, request);
  }

  // Registers, writes the changed tensors' `tag` bytes, commits.
  ComponentSnapshot Derive(const std::string& key, const std::string& base,
                           const std::set<std::string>& changed, const std::string& tag,
                           const Lease* lease = nullptr) {
    auto registered = Register(key, base, changed, tag, lease);
    EXPECT_TRUE(registered.ok()) << registered.status();
    if (!registered.ok()) return {};
    EXPECT_FALSE(registered->warm_hit);
    Fill(registered->component, tag);
    auto ready = store_->Commit((lease != nullptr ? *lease : lease_).id, registered->upload_id);
    EXPECT_TRUE(ready.ok()) << ready.status();
    return ready.ok() ? *ready : ComponentSnapshot{};
  }

  // Checks every tensor of `key` holds the bytes of the version that wrote it last: `tags`
  // by tensor index.
  void ExpectBytes(const std::string& key, const std::vector<std::string>& tags) {
    auto attached = store_->AttachHost(lease_, key);
    ASSERT_TRUE(attached.ok()) << attached.status();
    const std::vector<TensorEntry>& tensors = attached->component.tensors;
    ASSERT_EQ(tensors.size(), tags.size());
    for (size_t i = 0; i < tensors.size(); ++i) {
      const std::string expected = Bytes(tags[i], tensors[i]);
      EXPECT_EQ(std::memcmp(attached->bytes.DataOf(tensors[i]), expected.data(), expected.size()),
                0)
          << key << ": " << tensors[i].name << " should hold " << tags[i] << "'s bytes";
    }
    ASSERT_TRUE(store_->Detach(attached->session_id, lease_.caller).ok());
  }

  static bool InShm(const std::string& name) { return std::filesystem::exists(SegmentPath(name)); }

  TempDirForTest dir_;
  PoolOptions pool_options_;
  SessionRegistry registry_;  // outlives the store
  std::unique_ptr<HostPool> pool_;
  std::unique_ptr<ComponentStore> store_;
  Lease lease_{RandomId(), 1234, "test", absl::Now(), DaemonCaller()};
};

TEST_F(DerivedComponentTest, OnlyTheChangedTensorsAreStoredAnewTheOthersAreTheBasesBytes) {
  const ComponentSnapshot base = UploadBase("base");
  const uint64_t before = pool_->Usage().reserved_bytes;
  ASSERT_EQ(before, 4 * kMiB);

  auto registered = Register("base+lora", "base", {"blocks.1.weight", "blocks.3.weight"}, "lora");
  ASSERT_TRUE(registered.ok()) << registered.status();
  EXPECT_FALSE(registered->warm_hit);
  const ComponentSnapshot& uploading = registered->component;
  // The upload's layout: the new segment only, the changed tensors only.
  ddo::v1::RegisterComponentResponse response;
  UploadLayoutToProto(uploading, &response);
  ASSERT_EQ(response.segments_size(), 1);
  EXPECT_EQ(response.segments(0).shm_name(), uploading.segment_name);
  EXPECT_NE(uploading.segment_name, base.segment_name);
  ASSERT_EQ(response.placements_size(), 2);
  EXPECT_EQ(response.placements(0).name(), "blocks.1.weight");
  EXPECT_EQ(response.placements(1).name(), "blocks.3.weight");
  EXPECT_EQ(response.placements(0).segment(), 0u);
  // Pool usage grew by the changed bytes, rounded to the segment granularity, only.
  EXPECT_EQ(pool_->Usage().reserved_bytes - before, HostPool::Footprint(2 * kMiB));
  EXPECT_TRUE(absl::IsNotFound(store_->Get("base+lora", DaemonCaller()).status()));

  Fill(uploading, "lora");
  auto ready = store_->Commit(lease_.id, registered->upload_id);
  ASSERT_TRUE(ready.ok()) << ready.status();
  EXPECT_EQ(ready->base_cache_key, "base");
  EXPECT_EQ(ready->base_component_id, base.component_id);
  EXPECT_EQ(ready->structure_hash, base.structure_hash);
  EXPECT_EQ(ready->changed_tensors, 2u);
  EXPECT_EQ(ready->own_bytes, 2 * kMiB);
  EXPECT_EQ(ready->total_bytes, 4 * kMiB);
  EXPECT_EQ(pool_->Usage().segments, 2u);
  EXPECT_EQ(store_->Stats().used_bytes, 6 * kMiB) << "shared bytes counted once";

  // Unchanged tensors: the base's segment and the very same bytes (same pointer).
  ASSERT_EQ(ready->segments.size(), 2u);
  EXPECT_EQ(ready->segments[0].name, ready->segment_name);
  EXPECT_EQ(ready->segments[1].name, base.segment_name);
  auto derived = store_->AttachHost(lease_, "base+lora");
  auto original = store_->AttachHost(lease_, "base");
  ASSERT_TRUE(derived.ok() && original.ok());
  for (size_t i = 0; i < 4; ++i) {
    const TensorEntry& mine = derived->component.tensors[i];
    const TensorEntry& theirs = original->component.tensors[i];
    if (i == 1 || i == 3) {
      EXPECT_EQ(mine.segment, 0u);
      EXPECT_NE(derived->bytes.DataOf(mine), original->bytes.DataOf(theirs));
    } else {
      EXPECT_EQ(derived->component.segments[mine.segment].name, base.segment_name);
      EXPECT_EQ(derived->bytes.DataOf(mine), original->bytes.DataOf(theirs));
    }
  }
  ASSERT_TRUE(store_->Detach(derived->session_id, lease_.caller).ok());
  ASSERT_TRUE(store_->Detach(original->session_id, lease_.caller).ok());
  ExpectBytes("base+lora", {"base", "lora", "base", "lora"});
  ExpectBytes("base", {"base", "base", "base", "base"});  // other runners are unaffected

  // The protocol view: every segment listed, each placement indexing it.
  ddo::v1::ComponentInfo info;
  ToProto(*ready, /*with_layout=*/true, &info);
  EXPECT_EQ(info.base_cache_key(), "base");
  EXPECT_EQ(info.changed_tensors(), 2u);
  EXPECT_EQ(info.own_bytes(), 2 * kMiB);
  ASSERT_EQ(info.segments_size(), 2);
  EXPECT_EQ(info.segments(info.placements(0).segment()).shm_name(), base.segment_name);
  EXPECT_EQ(info.segments(info.placements(1).segment()).shm_name(), ready->segment_name);
  ddo::v1::ComponentInfo plain;
  ToProto(base, /*with_layout=*/false, &plain);
  EXPECT_EQ(plain.base_cache_key(), "");
  EXPECT_EQ(plain.changed_tensors(), 0u);
  EXPECT_EQ(plain.own_bytes(), 4 * kMiB);
}

TEST_F(DerivedComponentTest, AContentHashMismatchDiscardsTheUpload) {
  UploadBase("base");
  auto registered = Register("base+lora", "base", {"blocks.2.weight"}, "lora");
  ASSERT_TRUE(registered.ok()) << registered.status();
  Fill(registered->component, "something else");
  const std::string segment = registered->component.segment_name;
  auto ready = store_->Commit(lease_.id, registered->upload_id);
  EXPECT_TRUE(absl::IsInvalidArgument(ready.status()));
  EXPECT_THAT(std::string(ready.status().message()), HasSubstr("content hash mismatch"));
  EXPECT_TRUE(absl::IsNotFound(store_->Get("base+lora", DaemonCaller()).status()));
  EXPECT_FALSE(InShm(segment));
  EXPECT_EQ(pool_->Usage().reserved_bytes, 4 * kMiB);
  ExpectBytes("base", {"base", "base", "base", "base"});
}

TEST_F(DerivedComponentTest, BadRequestsAreRefusedNamingTheProblem) {
  UploadBase("base");
  auto code_and_message = [&](DerivedRequest request) {
    auto result = store_->RegisterDerived(lease_, request);
    EXPECT_FALSE(result.ok());
    return std::make_pair(result.status().code(), std::string(result.status().message()));
  };
  DerivedRequest good;
  good.cache_key = "base+lora";
  good.base_cache_key = "base";
  good.changed_tensors = {"blocks.0.weight"};
  good.content_hash = HashOf(Table(4), {"blocks.0.weight"}, "lora");

  DerivedRequest request = good;
  request.changed_tensors = {"blocks.0.weight", "no.such\x1b[2J"};
  auto [code, message] = code_and_message(request);
  EXPECT_EQ(code, absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(message, HasSubstr("changed_tensors[1]"));
  EXPECT_THAT(message, HasSubstr("is not a tensor of 'base'"));
  EXPECT_THAT(message, ::testing::Not(HasSubstr("\x1b")));

  request = good;
  request.changed_tensors = {"blocks.0.weight", "blocks.0.weight"};
  std::tie(code, message) = code_and_message(request);
  EXPECT_EQ(code, absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(message, HasSubstr("named twice"));

  request = good;
  request.changed_tensors.clear();
  std::tie(code, message) = code_and_message(request);
  EXPECT_EQ(code, absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(message, HasSubstr("changed_tensors is empty"));

  request = good;
  request.content_hash.clear();
  std::tie(code, message) = code_and_message(request);
  EXPECT_EQ(code, absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(message, HasSubstr("needs content_hash"));

  request = good;
  request.content_hash = "md5:abc";
  std::tie(code, message) = code_and_message(request);
  EXPECT_EQ(code, absl::StatusCode::kInvalidArgument);

  request = good;
  request.cache_key = "base";
  std::tie(code, message) = code_and_message(request);
  EXPECT_EQ(code, absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(message, HasSubstr("from itself"));

  request = good;
  request.base_cache_key = "absent";
  std::tie(code, message) = code_and_message(request);
  EXPECT_EQ(code, absl::StatusCode::kNotFound);

  // A version of a version of K cannot be registered under K.
  Derive("base+lora", "base", {"blocks.0.weight"}, "lora");
  request = good;
  request.cache_key = "base";
  request.base_cache_key = "base+lora";
  std::tie(code, message) = code_and_message(request);
  EXPECT_EQ(code, absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(message, HasSubstr("a version of itself"));
  EXPECT_EQ(pool_->Usage().segments, 2u) << "nothing allocated by refused requests";
}

TEST_F(DerivedComponentTest, ADerivedVersionOfADerivedVersionSharesEverythingAndRecordsTheRoot) {
  const ComponentSnapshot base = UploadBase("base");
  const ComponentSnapshot first = Derive("base+a", "base", {"blocks.1.weight"}, "a");
  const uint64_t before = pool_->Usage().reserved_bytes;
  const ComponentSnapshot second =
      Derive("base+a+b", "base+a", {"blocks.2.weight", "blocks.3.weight"}, "b");
  EXPECT_EQ(second.base_cache_key, "base");
  EXPECT_EQ(second.base_component_id, base.component_id);
  EXPECT_EQ(second.changed_tensors, 2u);
  EXPECT_EQ(pool_->Usage().reserved_bytes - before, HostPool::Footprint(2 * kMiB));
  // Its own segment, then the ones it shares: the base's and the first version's.
  ASSERT_EQ(second.segments.size(), 3u);
  EXPECT_EQ(second.segments[0].name, second.segment_name);
  EXPECT_EQ(second.segments[1].name, base.segment_name);
  EXPECT_EQ(second.segments[2].name, first.segment_name);
  ExpectBytes("base+a+b", {"base", "a", "b", "b"});
  ExpectBytes("base+a", {"base", "a", "base", "base"});

  // Changing what the first version changed: its segment is not needed, so not listed.
  const ComponentSnapshot third = Derive("base+a+c", "base+a", {"blocks.1.weight"}, "c");
  ASSERT_EQ(third.segments.size(), 2u);
  EXPECT_EQ(third.segments[1].name, base.segment_name);
  ExpectBytes("base+a+c", {"base", "c", "base", "base"});
}

TEST_F(DerivedComponentTest, TheSameVersionAgainIsAWarmHitAnotherReplacesItWhenUnused) {
  UploadBase("base");
  const ComponentSnapshot first = Derive("base+lora", "base", {"blocks.0.weight"}, "lora");
  const uint32_t segments = pool_->Usage().segments;

  auto again = Register("base+lora", "base", {"blocks.0.weight"}, "lora");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(again->warm_hit);
  EXPECT_TRUE(again->upload_id.empty());
  EXPECT_EQ(again->component.segment_name, first.segment_name);
  EXPECT_EQ(pool_->Usage().segments, segments) << "no second copy";

  // A plain registration of the base's table is not answered with the derived bytes.
  {
    auto session = store_->AttachHost(lease_, "base+lora");
    ASSERT_TRUE(session.ok());
    auto plain = store_->Register(lease_, "base+lora", Table(4), "");
    EXPECT_TRUE(absl::IsFailedPrecondition(plain.status())) << plain.status();
    // Another LoRA under the same key while a session holds it: refused too.
    auto other = Register("base+lora", "base", {"blocks.0.weight"}, "other");
    EXPECT_TRUE(absl::IsFailedPrecondition(other.status())) << other.status();
    ASSERT_TRUE(store_->Detach(session->session_id, lease_.caller).ok());
  }
  // Unused: another LoRA replaces it.
  const ComponentSnapshot replaced = Derive("base+lora", "base", {"blocks.0.weight"}, "other");
  EXPECT_NE(replaced.segment_name, first.segment_name);
  EXPECT_FALSE(InShm(first.segment_name));
  ExpectBytes("base+lora", {"other", "base", "base", "base"});
  // Other changed tensors with the same bytes elsewhere: not the same version either.
  auto moved = Register("base+lora", "base", {"blocks.1.weight"}, "other");
  ASSERT_TRUE(moved.ok());
  EXPECT_FALSE(moved->warm_hit);
  ASSERT_TRUE(store_->Abort(lease_.id, moved->upload_id).ok());
}

TEST_F(DerivedComponentTest, AnotherUserCannotSeeOrDeriveFromIt) {
  const uid_t owner_uid = ::geteuid() == 5001 ? 5003 : 5001;
  const uid_t other_uid = ::geteuid() == 5002 ? 5004 : 5002;
  const Lease owner = LeaseOf(owner_uid);
  const Lease other = LeaseOf(other_uid);
  UploadBase("owner/base", 4, &owner);
  const ComponentSnapshot derived =
      Derive("owner/base+lora", "owner/base", {"blocks.0.weight"}, "lora", &owner);
  EXPECT_EQ(derived.owner_uid, owner_uid);

  // Invisible: not listed, not found, not attachable, as if absent.
  EXPECT_TRUE(store_->List(other.caller).empty());
  EXPECT_TRUE(absl::IsNotFound(store_->Get("owner/base+lora", other.caller).status()));
  EXPECT_TRUE(absl::IsNotFound(store_->AttachHost(other, "owner/base+lora").status()));
  EXPECT_TRUE(absl::IsNotFound(store_->Evict("owner/base+lora", other.caller).status()));
  // Deriving from the owner's base or from its version: NOT_FOUND, nothing allocated.
  const uint32_t segments = pool_->Usage().segments;
  auto from_base = Register("mine", "owner/base", {"blocks.0.weight"}, "lora", &other);
  EXPECT_TRUE(absl::IsNotFound(from_base.status())) << from_base.status();
  auto from_version = Register("mine", "owner/base+lora", {"blocks.1.weight"}, "x", &other);
  EXPECT_TRUE(absl::IsNotFound(from_version.status())) << from_version.status();
  // The same version under the owner's key name: the other user's own entry, neither a warm
  // hit nor a replacement.
  UploadBase("other/base", 4, &other);
  auto same_key = Register("owner/base+lora", "other/base", {"blocks.0.weight"}, "lora", &other);
  ASSERT_TRUE(same_key.ok()) << same_key.status();
  EXPECT_FALSE(same_key->warm_hit);
  EXPECT_EQ(pool_->Usage().segments, segments + 2);  // other/base and its version
  // The owner sees its own; an admin lists it.
  EXPECT_TRUE(store_->Get("owner/base+lora", owner.caller).ok());
  EXPECT_EQ(store_->Get("owner/base+lora", owner.caller)->segment_name, derived.segment_name);
}

TEST_F(DerivedComponentTest, EvictingTheBaseKeepsTheDerivedVersionReadable) {
  const ComponentSnapshot base = UploadBase("base");
  const ComponentSnapshot derived = Derive("base+lora", "base", {"blocks.3.weight"}, "lora");
  const uint64_t reserved = pool_->Usage().reserved_bytes;

  auto freed = store_->Evict("base", DaemonCaller());
  ASSERT_TRUE(freed.ok()) << freed.status();
  EXPECT_EQ(*freed, 0u) << "its bytes stay while the derived version uses them";
  EXPECT_EQ(pool_->Usage().reserved_bytes, reserved);
  EXPECT_TRUE(absl::IsNotFound(store_->Get("base", DaemonCaller()).status()));
  EXPECT_TRUE(InShm(base.segment_name));
  auto kept = store_->Get("base+lora", DaemonCaller());
  ASSERT_TRUE(kept.ok());
  EXPECT_EQ(kept->base_cache_key, "base");
  ExpectBytes("base+lora", {"base", "base", "base", "lora"});

  // A later derived version of it still shares the evicted base's bytes.
  Derive("base+lora+b", "base+lora", {"blocks.0.weight"}, "b");
  ExpectBytes("base+lora+b", {"b", "base", "base", "lora"});
  ASSERT_TRUE(store_->Evict("base+lora+b", DaemonCaller()).ok());

  // The last user of the base's bytes goes: all of it is released.
  freed = store_->Evict("base+lora", DaemonCaller());
  ASSERT_TRUE(freed.ok());
  EXPECT_EQ(*freed, HostPool::Footprint(kMiB) + base.segment_size);
  EXPECT_EQ(pool_->Usage().reserved_bytes, 0u);
  EXPECT_FALSE(InShm(base.segment_name));
  EXPECT_FALSE(InShm(derived.segment_name));
}

TEST_F(DerivedComponentTest, MakingRoomEvictsTheDerivedVersionBeforeItsBaseReleasesAnything) {
  pool_options_.budget_bytes = 8 * kMiB;
  Restart();
  UploadBase("base");                                           // 4 MiB, used first
  Derive("base+lora", "base", {"blocks.0.weight", "blocks.1.weight"}, "lora");  // 2 MiB
  // Held by a session, the derived version keeps the base's bytes: evicting the base would
  // release nothing, so it is not evicted, and the new component does not fit.
  {
    auto session = store_->AttachHost(lease_, "base+lora");
    ASSERT_TRUE(session.ok());
    auto refused = store_->Register(lease_, "big", Table(4), "");
    EXPECT_TRUE(absl::IsResourceExhausted(refused.status())) << refused.status();
    EXPECT_TRUE(store_->Get("base", DaemonCaller()).ok()) << "the base was not evicted for nothing";
    ASSERT_TRUE(store_->Detach(session->session_id, lease_.caller).ok());
  }  // the attachment's own reference to the bytes goes too

  // Unused: a 6 MiB component needs both gone, the derived version first (only then does the
  // base's eviction release its bytes).
  auto registered = store_->Register(lease_, "bigger", Table(6), "");
  ASSERT_TRUE(registered.ok()) << registered.status();
  EXPECT_TRUE(absl::IsNotFound(store_->Get("base", DaemonCaller()).status()));
  EXPECT_TRUE(absl::IsNotFound(store_->Get("base+lora", DaemonCaller()).status()));
  EXPECT_EQ(store_->Stats().evictions, 2u);
  EXPECT_EQ(pool_->Usage().reserved_bytes, 6 * kMiB);
  ASSERT_TRUE(store_->Abort(lease_.id, registered->upload_id).ok());
  EXPECT_EQ(pool_->Usage().reserved_bytes, 0u);
}

TEST_F(DerivedComponentTest, ARestartedDaemonAdoptsBaseAndDerivedVersionsSegmentsOnce) {
  const ComponentSnapshot base = UploadBase("base");
  Derive("base+a", "base", {"blocks.1.weight"}, "a");
  Derive("base+a+b", "base+a", {"blocks.2.weight"}, "b");
  const PoolUsage before = pool_->Usage();
  Restart();
  EXPECT_EQ(store_->Stats().adopted, 3u);
  EXPECT_EQ(pool_->Usage().segments, before.segments) << "each segment adopted once";
  EXPECT_EQ(pool_->Usage().reserved_bytes, before.reserved_bytes);
  auto adopted = store_->Get("base+a+b", DaemonCaller());
  ASSERT_TRUE(adopted.ok()) << adopted.status();
  EXPECT_EQ(adopted->base_cache_key, "base");
  EXPECT_EQ(adopted->base_component_id, base.component_id);
  EXPECT_EQ(adopted->changed_tensors, 1u);
  EXPECT_EQ(adopted->own_bytes, kMiB);
  ExpectBytes("base", {"base", "base", "base", "base"});
  ExpectBytes("base+a", {"base", "a", "base", "base"});
  ExpectBytes("base+a+b", {"base", "a", "b", "base"});
  // The same version again is still warm.
  auto again = Register("base+a+b", "base+a", {"blocks.2.weight"}, "b");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(again->warm_hit);

  // The base's segment disappears while ddod is down: the versions that share it are refused
  // (logged), their own segments removed; nothing half-there is served.
  const std::string own_a = store_->Get("base+a", DaemonCaller())->segment_name;
  store_.reset();
  ASSERT_EQ(::shm_unlink(base.segment_name.c_str()), 0);
  Restart();
  EXPECT_EQ(store_->Stats().adopted, 0u);
  EXPECT_TRUE(absl::IsNotFound(store_->Get("base+a", DaemonCaller()).status()));
  EXPECT_TRUE(absl::IsNotFound(store_->Get("base+a+b", DaemonCaller()).status()));
  EXPECT_FALSE(InShm(own_a));
  EXPECT_EQ(pool_->Usage().reserved_bytes, 0u);
}

// Streaming sessions of a derived version on the host backend.
class DerivedStreamingTest : public DerivedComponentTest {
 protected:
  void SetUp() override {
    DerivedComponentTest::SetUp();
    StreamSessionsOptions options;
    options.keep_slabs_warm = true;
    streams_ = std::make_unique<StreamSessions>(*store_, registry_, *pool_, GpuInventory{}, options);
  }
  void TearDown() override {
    streams_.reset();
    DerivedComponentTest::TearDown();
  }

  // Opens a session with blocks.0 and blocks.1 resident, the others streamed.
  absl::StatusOr<OpenedStream> Open(const std::string& key) {
    StreamAttachRequest request;
    request.cache_key = key;
    request.device = "cpu";
    request.settings["DDO_SMALL_TENSOR_THRESHOLD_KB"] = "0";
    request.streamable = {"blocks.2.weight", "blocks.3.weight"};
    return OpenStream(*store_, *streams_, lease_, request, MachineFacts{});
  }

  // Whether the session's slab was warm or filled now (the last "slab" decision).
  std::string SlabDecision(const OpenedStream& opened) {
    std::string value;
    for (const PlanDecisionEntry& decision : opened.plan.decisions) {
      if (decision.key == "slab") value = decision.value;
    }
    return value;
  }

  std::unique_ptr<StreamSessions> streams_;
};

TEST_F(DerivedStreamingTest, ItsSlabHoldsItsBytesAndItStartsWithItsBasesSchedule) {
  UploadBase("base");
  Derive("base+lora", "base", {"blocks.1.weight", "blocks.3.weight"}, "lora");

  auto base_session = Open("base");
  ASSERT_TRUE(base_session.ok()) << base_session.status();
  EXPECT_TRUE(base_session->schedule.empty());
  ASSERT_TRUE(streams_->SetSchedule(base_session->session_id, {0, 1}).ok());
  ASSERT_TRUE(streams_->Detach(base_session->session_id).ok());
  ASSERT_EQ(streams_->warm_slab_count(), 1u);  // the base's slab stays warm

  auto derived_session = Open("base+lora");
  ASSERT_TRUE(derived_session.ok()) << derived_session.status();
  // The base's warm slab holds the base's blocks.1: never reused for the derived version.
  EXPECT_EQ(SlabDecision(*derived_session), "filled now");
  // The base's runners learned the order of the same units.
  EXPECT_THAT(derived_session->schedule, ::testing::ElementsAre(0, 1));
  // The slab: blocks.0 the base's bytes, blocks.1 the derived version's.
  auto slab = SharedSegment::Open(derived_session->memory.resident_slab_shm);
  ASSERT_TRUE(slab.ok()) << slab.status();
  ASSERT_EQ(derived_session->plan.resident.size(), 2u);
  const std::vector<TensorEntry> table = Table(4);
  for (const PlannedTensor& resident : derived_session->plan.resident) {
    const std::string& name = derived_session->component.tensors[resident.table_index].name;
    const TensorEntry& tensor = name == "blocks.0.weight" ? table[0] : table[1];
    const std::string expected = Bytes(name == "blocks.0.weight" ? "base" : "lora", tensor);
    EXPECT_EQ(std::memcmp(slab->data() + resident.offset, expected.data(), expected.size()), 0)
        << name;
  }
  ASSERT_TRUE(streams_->Detach(derived_session->session_id).ok());

  // One warm slab per device, the newest: now the derived version's. It serves the derived
  // version again, never the base.
  ASSERT_EQ(streams_->warm_slab_count(), 1u);
  auto base_again = Open("base");
  ASSERT_TRUE(base_again.ok()) << base_again.status();
  EXPECT_EQ(SlabDecision(*base_again), "filled now");
  ASSERT_TRUE(streams_->Detach(base_again->session_id).ok());
  auto derived_again = Open("base+lora");
  ASSERT_TRUE(derived_again.ok()) << derived_again.status();
  EXPECT_EQ(SlabDecision(*derived_again), "filled now");  // the base's slab was the newest
  ASSERT_TRUE(streams_->Detach(derived_again->session_id).ok());
  auto derived_warm = Open("base+lora");
  ASSERT_TRUE(derived_warm.ok()) << derived_warm.status();
  EXPECT_EQ(SlabDecision(*derived_warm), "warm");  // its own slab
  ASSERT_TRUE(streams_->Detach(derived_warm->session_id).ok());
}

}  // namespace
}  // namespace ddo
