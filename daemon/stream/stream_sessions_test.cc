// File: daemon/stream/stream_sessions_test.cc
//
// StreamSessions on the host backend ("cpu"), and the SessionDirectory over it: ddod's budget on a device (a refusal names the
// sizes and leaves nothing behind), every byte given back when sessions close, warm slabs
// (reused, keeping only their share, giving way least recently used first), a Phase that
// releases and prefetches them, and the end of a lease.
#include "daemon/common/random_id.h"
#include "daemon/stream/stream_sessions.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "daemon/common/temp_dir_for_test.h"
#include "daemon/policy/session_planner.h"
#include "daemon/service/stream_opener.h"
#include "daemon/stream/session_directory.h"

namespace ddo {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kMiB = 1 << 20;

TensorEntry Tensor(const std::string& name, std::vector<int64_t> shape) {
  TensorEntry entry;
  entry.name = name;
  entry.dtype = DType::kBF16;
  entry.shape = std::move(shape);
  entry.byte_size = 2;
  for (int64_t d : entry.shape) entry.byte_size *= static_cast<uint64_t>(d);
  return entry;
}

// proj_in (always resident), two blocks of two 256 x 256 Linears (streamed), proj_out.
struct Model {
  std::vector<TensorEntry> tensors;
  std::set<std::string> streamable;
};

Model MakeModel() {
  Model model;
  auto linear = [&](const std::string& path) {
    model.tensors.push_back(Tensor(path + ".weight", {256, 256}));
    model.tensors.push_back(Tensor(path + ".bias", {256}));
    model.streamable.insert(path + ".weight");
  };
  linear("proj_in");
  for (int b = 0; b < 2; ++b) {
    linear(absl::StrCat("blocks.", b, ".attn.to_q"));
    linear(absl::StrCat("blocks.", b, ".ff.net.0"));
  }
  linear("proj_out");
  return model;
}

class StreamSessionsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    PoolOptions pool;
    pool.budget_bytes = 64 * kMiB;
    pool.name_namespace = PoolNamespace(dir_.Join("sock"));
    pool_ = std::make_unique<HostPool>(pool);
    store_ = std::make_unique<ComponentStore>(*pool_, registry_,
                                              StoreOptions{dir_.Join("manifest.json"), 2});
  }
  void TearDown() override {
    sessions_.reset();
    store_->Close(/*discard=*/true);
  }

  void Start(uint64_t host_budget_bytes, bool keep_slabs_warm) {
    StreamSessionsOptions options;
    options.host_budget_bytes = host_budget_bytes;
    options.keep_slabs_warm = keep_slabs_warm;
    sessions_ =
        std::make_unique<StreamSessions>(*store_, registry_, *pool_, GpuInventory{}, options);
  }

  void Upload(const std::string& key) {
    auto registered = store_->Register(lease_, key, MakeModel().tensors, "");
    ASSERT_TRUE(registered.ok()) << registered.status();
    ASSERT_TRUE(store_->Commit(lease_.id, registered->upload_id).ok());
  }

  // Attaches `key` on the host, plans it as policy would and opens the session; gives the
  // attachment back when the session does not open (Open's contract).
  absl::StatusOr<OpenedStream> Open(const std::string& key) {
    absl::StatusOr<HostAttachment> attached = store_->AttachHost(lease_, key);
    if (!attached.ok()) return attached.status();
    const std::string attachment = attached->session_id;
    // The blocks stream (a ring), proj_in/proj_out and the small tensors stay (a slab).
    absl::StatusOr<StreamSettings> settings = ParseStreamSettings(
        {{"DDO_RESIDENT_MODULE_BUDGET_GB", "0"}, {"DDO_SMALL_TENSOR_THRESHOLD_KB", "16"}});
    EXPECT_TRUE(settings.ok()) << settings.status();
    absl::StatusOr<SessionPlan> plan =
        PlanSession(attached->component.tensors, MakeModel().streamable, *settings);
    absl::StatusOr<OpenedStream> opened =
        plan.ok() ? sessions_->Open(lease_, *std::move(attached), "cpu", *std::move(plan))
                  : absl::StatusOr<OpenedStream>(plan.status());
    if (!opened.ok()) {
      EXPECT_TRUE(store_->Detach(attachment, lease_.caller).ok());
    }
    return opened;
  }

  // The plan's last decision named `key` (the last "slab": "warm" or "filled now").
  static std::string Decision(const OpenedStream& opened, const std::string& key) {
    std::string value;
    for (const PlanDecisionEntry& decision : opened.plan.decisions) {
      if (decision.key == key) value = decision.value;
    }
    return value;
  }

  uint32_t HostSessionsOf(const std::string& key) {
    for (const auto& component : store_->List(DaemonCaller())) {
      if (component.cache_key == key) return component.sessions;
    }
    return 0;
  }

  static uint64_t DeviceBytes(const OpenedStream& opened) { return opened.plan.device_bytes(); }

  TempDirForTest dir_;
  SessionRegistry registry_;  // outlives the store
  std::unique_ptr<HostPool> pool_;
  std::unique_ptr<ComponentStore> store_;
  std::unique_ptr<StreamSessions> sessions_;
  Lease lease_{RandomId(), 1234, "test", absl::Now(), DaemonCaller()};
};

TEST_F(StreamSessionsTest, ABudgetTooSmallIsRefusedWithTheSizesAndLeavesNothingBehind) {
  Start(/*host_budget_bytes=*/64 << 10, /*keep_slabs_warm=*/false);
  Upload("model");
  absl::StatusOr<OpenedStream> refused = Open("model");
  ASSERT_TRUE(absl::IsResourceExhausted(refused.status())) << refused.status();
  EXPECT_THAT(refused.status().message(), HasSubstr("a session of 'model' needs "));
  EXPECT_THAT(refused.status().message(), HasSubstr("ddod's budget there is 64.0 KiB"));
  EXPECT_EQ(sessions_->reserved_bytes("cpu"), 0u);
  EXPECT_EQ(HostSessionsOf("model"), 0u) << "the component was given back";
  EXPECT_TRUE(sessions_->List().empty());
}

TEST_F(StreamSessionsTest, ClosingGivesEveryByteBack) {
  Start(/*host_budget_bytes=*/0, /*keep_slabs_warm=*/false);
  Upload("model");
  absl::StatusOr<OpenedStream> opened = Open("model");
  ASSERT_TRUE(opened.ok()) << opened.status();
  EXPECT_GT(opened->plan.slab_bytes, 0u);
  EXPECT_GT(opened->plan.arena_bytes, 0u);
  EXPECT_EQ(sessions_->reserved_bytes("cpu"), DeviceBytes(*opened));
  EXPECT_EQ(HostSessionsOf("model"), 1u);
  ASSERT_TRUE(sessions_->Detach(opened->session_id).ok());
  EXPECT_EQ(sessions_->reserved_bytes("cpu"), 0u);
  EXPECT_EQ(sessions_->warm_slab_count(), 0u);
  EXPECT_EQ(HostSessionsOf("model"), 0u);
  EXPECT_TRUE(absl::IsNotFound(sessions_->Detach(opened->session_id)));
}

TEST_F(StreamSessionsTest, AWarmSlabIsReusedAndHoldsOnlyItsShare) {
  Start(/*host_budget_bytes=*/0, /*keep_slabs_warm=*/true);
  Upload("model");
  absl::StatusOr<OpenedStream> first = Open("model");
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(Decision(*first, "slab"), "filled now");
  ASSERT_TRUE(sessions_->Detach(first->session_id).ok());
  EXPECT_EQ(sessions_->warm_slab_count(), 1u);
  EXPECT_EQ(sessions_->reserved_bytes("cpu"), first->plan.slab_bytes)
      << "the ring's share went back, the slab's stays";

  absl::StatusOr<OpenedStream> second = Open("model");
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(Decision(*second, "slab"), "warm");
  EXPECT_EQ(sessions_->warm_slab_count(), 0u);
  EXPECT_EQ(sessions_->reserved_bytes("cpu"), DeviceBytes(*second)) << "counted once";
  sessions_->CloseAll();
  EXPECT_EQ(sessions_->reserved_bytes("cpu"), 0u) << "CloseAll frees the warm slabs too";
}

TEST_F(StreamSessionsTest, WarmSlabsGiveWayLeastRecentlyUsedFirst) {
  // Measure one session, then give ddod room for one session and half a slab more.
  Start(/*host_budget_bytes=*/0, /*keep_slabs_warm=*/true);
  Upload("a");
  Upload("b");
  absl::StatusOr<OpenedStream> probe = Open("a");
  ASSERT_TRUE(probe.ok()) << probe.status();
  const uint64_t session_bytes = DeviceBytes(*probe);
  const uint64_t slab_bytes = probe->plan.slab_bytes;
  sessions_.reset();
  Start(session_bytes + slab_bytes / 2, /*keep_slabs_warm=*/true);

  absl::StatusOr<OpenedStream> a = Open("a");
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(sessions_->Detach(a->session_id).ok());
  ASSERT_EQ(sessions_->warm_slab_count(), 1u);
  // b's session does not fit beside a's warm slab: the slab gives way.
  absl::StatusOr<OpenedStream> b = Open("b");
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(sessions_->warm_slab_count(), 0u);
  EXPECT_EQ(sessions_->reserved_bytes("cpu"), DeviceBytes(*b));
  // Nothing gives way for a second open session: refused.
  absl::StatusOr<OpenedStream> a_again = Open("a");
  EXPECT_TRUE(absl::IsResourceExhausted(a_again.status())) << a_again.status();
  EXPECT_EQ(sessions_->reserved_bytes("cpu"), DeviceBytes(*b));
}

// Issue 31 (lower item): a phase's prefetch notes told an existing key from an unknown one
// (the store's "no component ... in the pool" came back for a key whose component was gone).
// Every key that cannot be prefetched gets the same words.
TEST_F(StreamSessionsTest, PrefetchNotesDoNotTellAKeyThatExistsFromOneThatDoesNot) {
  Start(/*host_budget_bytes=*/0, /*keep_slabs_warm=*/true);
  Upload("gone");
  absl::StatusOr<OpenedStream> opened = Open("gone");
  ASSERT_TRUE(opened.ok()) << opened.status();
  ASSERT_TRUE(sessions_->Detach(opened->session_id).ok());
  (void)sessions_->Phase(lease_, {}, {}, {});  // its warm slab goes; its placement is remembered
  ASSERT_TRUE(store_->Evict("gone", lease_.caller).ok());
  Upload("quiet");  // in the pool, never streamed

  StreamSessions::PhaseResult result =
      sessions_->Phase(lease_, {}, {}, {"gone", "quiet", "absent"});
  EXPECT_EQ(result.prefetched_bytes, 0u);
  std::vector<std::string> reasons;
  for (const std::string& note : result.notes) {
    const size_t colon = note.find("': ");
    ASSERT_NE(colon, std::string::npos) << note;
    reasons.push_back(note.substr(colon + 3));
  }
  ASSERT_EQ(reasons.size(), 3u) << testing::PrintToString(result.notes);
  EXPECT_EQ(reasons[0], reasons[1]);
  EXPECT_EQ(reasons[1], reasons[2]);
}

TEST_F(StreamSessionsTest, APhaseReleasesWarmSlabsAndPrefetchesTheLastPlacement) {
  Start(/*host_budget_bytes=*/0, /*keep_slabs_warm=*/true);
  Upload("model");
  absl::StatusOr<OpenedStream> first = Open("model");
  ASSERT_TRUE(first.ok()) << first.status();
  const uint64_t slab_bytes = first->plan.slab_bytes;
  ASSERT_TRUE(sessions_->Detach(first->session_id).ok());

  StreamSessions::PhaseResult kept = sessions_->Phase(lease_, {"model"}, {}, {});
  EXPECT_EQ(kept.released_bytes, 0u);
  StreamSessions::PhaseResult released = sessions_->Phase(lease_, {}, {}, {});
  EXPECT_EQ(released.released_bytes, slab_bytes);
  EXPECT_EQ(sessions_->reserved_bytes("cpu"), 0u);

  StreamSessions::PhaseResult prefetched = sessions_->Phase(lease_, {"model"}, {}, {"model", "other"});
  EXPECT_EQ(prefetched.prefetched_bytes, slab_bytes);
  EXPECT_THAT(prefetched.notes, testing::Contains(HasSubstr("'other': no earlier session")));
  EXPECT_EQ(sessions_->reserved_bytes("cpu"), slab_bytes);
  EXPECT_EQ(HostSessionsOf("model"), 0u) << "the prefetch gave the component back";
  StreamSessions::PhaseResult again = sessions_->Phase(lease_, {"model"}, {}, {"model"});
  EXPECT_EQ(again.prefetched_bytes, 0u);
  EXPECT_THAT(again.notes, testing::Contains(HasSubstr("already on cpu")));

  absl::StatusOr<OpenedStream> next = Open("model");
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(Decision(*next, "slab"), "warm");
}

TEST_F(StreamSessionsTest, TheEndOfALeaseClosesItsSessionsOnly) {
  Start(/*host_budget_bytes=*/0, /*keep_slabs_warm=*/false);
  Upload("model");
  absl::StatusOr<OpenedStream> mine = Open("model");
  ASSERT_TRUE(mine.ok()) << mine.status();
  const Lease other{RandomId(), 99, "other", absl::Now(), DaemonCaller()};
  sessions_->ReleaseLease(other.id);
  EXPECT_EQ(sessions_->List().size(), 1u);
  sessions_->ReleaseLease(lease_.id);
  EXPECT_TRUE(sessions_->List().empty());
  EXPECT_EQ(sessions_->reserved_bytes("cpu"), 0u);
  EXPECT_EQ(HostSessionsOf("model"), 0u);
}

// OpenStream (the service's Attach to a device): each refusal comes before or after the host
// attach, and none leaves a session, a reservation or a count on the component behind.
TEST_F(StreamSessionsTest, OpenStreamRefusesInOrderAndLeavesNothingBehind) {
  Start(/*host_budget_bytes=*/64 << 10, /*keep_slabs_warm=*/false);
  Upload("model");
  StreamAttachRequest request;
  request.cache_key = "model";
  request.device = "cpu";
  request.streamable = MakeModel().streamable;
  auto open = [&](StreamAttachRequest changed) {
    return OpenStream(*store_, *sessions_, lease_, changed, MachineFacts{}).status();
  };
  auto nothing_left = [&] {
    EXPECT_EQ(registry_.size(), 0u);
    EXPECT_EQ(HostSessionsOf("model"), 0u);
    EXPECT_EQ(sessions_->reserved_bytes("cpu"), 0u);
    EXPECT_TRUE(sessions_->List().empty());
  };
  StreamAttachRequest unknown_device = request;
  unknown_device.device = "cpu:7";  // ddod serves one host device
  EXPECT_TRUE(absl::IsNotFound(open(unknown_device)));
  StreamAttachRequest bad_setting = request;
  bad_setting.settings["DDO_STREAM_UNIT"] = "layer";
  bad_setting.cache_key = "absent";  // the setting is refused before the component is looked up
  EXPECT_TRUE(absl::IsInvalidArgument(open(bad_setting)));
  StreamAttachRequest absent = request;
  absent.cache_key = "absent";
  EXPECT_TRUE(absl::IsNotFound(open(absent)));
  nothing_left();
  // After the attach: a name the component does not have, then ddod's budget on the device.
  StreamAttachRequest bad_name = request;
  bad_name.streamable.insert("blocks.9.nothing.weight");
  absl::Status refused = open(bad_name);
  EXPECT_TRUE(absl::IsInvalidArgument(refused)) << refused;
  EXPECT_THAT(refused.message(), HasSubstr("is not in the component"));
  nothing_left();
  refused = open(request);
  EXPECT_TRUE(absl::IsResourceExhausted(refused)) << refused;
  nothing_left();
}

// SessionDirectory over the same registries: one entry point for both kinds of session.
class SessionDirectoryTest : public StreamSessionsTest {
 protected:
  void SetUp() override {
    StreamSessionsTest::SetUp();
    Start(/*host_budget_bytes=*/0, /*keep_slabs_warm=*/false);
    ASSERT_TRUE(leases_.Open(lease_.caller, "test").ok());
    directory_ = std::make_unique<SessionDirectory>(leases_, registry_, *store_, *sessions_);
  }

  LeaseRegistry leases_{LeaseLimits{}};
  std::unique_ptr<SessionDirectory> directory_;
};

TEST_F(SessionDirectoryTest, ListsBothKindsDetachesWhereEachLivesAndEndsALease) {
  Upload("model");
  absl::StatusOr<OpenedStream> streaming = Open("model");
  ASSERT_TRUE(streaming.ok()) << streaming.status();
  absl::StatusOr<HostAttachment> host = store_->AttachHost(lease_, "model");
  ASSERT_TRUE(host.ok()) << host.status();

  std::vector<SessionView> seen = directory_->SessionsOf(lease_.caller);
  ASSERT_EQ(seen.size(), 2u);
  int streamed = 0;
  for (const SessionView& view : seen) streamed += view.stream.has_value() ? 1 : 0;
  EXPECT_EQ(streamed, 1) << "the streaming session shows its stream, the host attach none";

  // Another user sees neither and may detach neither.
  const Caller stranger = CallerFromCredentials(4242, 4242, 1);
  ASSERT_FALSE(stranger.admin);
  EXPECT_TRUE(directory_->SessionsOf(stranger).empty());
  EXPECT_TRUE(directory_->LeasesOf(stranger).empty());
  EXPECT_TRUE(absl::IsPermissionDenied(directory_->Detach(streaming->session_id, stranger)));
  EXPECT_TRUE(absl::IsPermissionDenied(
      directory_->SetSchedule(streaming->session_id, stranger, {0, 1}).status()));
  EXPECT_EQ(sessions_->List().size(), 1u);
  // The registry's record says where each session runs.
  EXPECT_EQ(registry_.FindFor(streaming->session_id, lease_.caller)->device, "cpu");
  EXPECT_EQ(registry_.FindFor(host->session_id, lease_.caller)->device, "");
  EXPECT_TRUE(absl::IsNotFound(directory_->SetSchedule(host->session_id, lease_.caller, {0}).status()))
      << "a host attach has no schedule";

  ASSERT_TRUE(directory_->Detach(streaming->session_id, lease_.caller).ok());
  EXPECT_TRUE(sessions_->List().empty()) << "the stream closed";
  EXPECT_EQ(HostSessionsOf("model"), 1u) << "the host attach stays";
  EXPECT_EQ(sessions_->reserved_bytes("cpu"), 0u);

  directory_->ReleaseLease(lease_.id);
  EXPECT_EQ(HostSessionsOf("model"), 0u);
  EXPECT_TRUE(directory_->SessionsOf(lease_.caller).empty());
}

}  // namespace
}  // namespace ddo
