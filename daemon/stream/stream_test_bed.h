// File: daemon/stream/stream_test_bed.h
//
// For the stream folder's tests on the host backend: a pool and a store holding small
// components (two 256 x 256 Linears that stream, two that stay resident), attached on the host
// and planned. The plan comes from the test (Plan): policy's planner sits above stream, so this
// header may not include it, while a test may.
//
// Thread-safety: a test's own; one thread.
#ifndef DDO_DAEMON_STREAM_STREAM_TEST_BED_H_
#define DDO_DAEMON_STREAM_STREAM_TEST_BED_H_

#include <gtest/gtest.h>

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "daemon/common/random_id.h"
#include "daemon/common/temp_dir_for_test.h"
#include "daemon/identity/caller.h"
#include "daemon/pool/host_pool.h"
#include "daemon/session/lease_registry.h"
#include "daemon/session/session_registry.h"
#include "daemon/store/component_store.h"
#include "daemon/layout/session_plan.h"

namespace ddo {

class StreamTestBed : public ::testing::Test {
 protected:
  static constexpr uint64_t kMiB = 1 << 20;

  struct Planned {
    HostAttachment attached;
    SessionPlan plan;
  };

  void SetUp() override {
    PoolOptions pool;
    pool.budget_bytes = 64 * kMiB;
    pool.name_namespace = PoolNamespace(dir_.Join("sock"));
    pool_ = std::make_unique<HostPool>(pool);
    store_ = std::make_unique<ComponentStore>(*pool_, registry_,
                                              StoreOptions{dir_.Join("manifest.json"), 2});
  }
  void TearDown() override { store_->Close(/*discard=*/true); }

  static TensorEntry Tensor(const std::string& name, std::vector<int64_t> shape) {
    TensorEntry entry;
    entry.name = name;
    entry.dtype = DType::kBF16;
    entry.shape = std::move(shape);
    entry.byte_size = 2;
    for (int64_t d : entry.shape) entry.byte_size *= static_cast<uint64_t>(d);
    return entry;
  }

  // proj_in and proj_out (resident), blocks.0 and blocks.1 (streamed).
  static std::vector<TensorEntry> Tensors(std::set<std::string>* streamable) {
    std::vector<TensorEntry> tensors;
    for (const std::string path : {"proj_in", "blocks.0.ff", "blocks.1.ff", "proj_out"}) {
      tensors.push_back(Tensor(path + ".weight", {256, 256}));
      tensors.push_back(Tensor(path + ".bias", {256}));
      if (absl::StartsWith(path, "blocks.")) streamable->insert(path + ".weight");
    }
    return tensors;
  }

  // Plans a session of `tensors` whose `streamable` weights stream and the rest stays.
  virtual absl::StatusOr<SessionPlan> Plan(const std::vector<TensorEntry>& tensors,
                                           const std::set<std::string>& streamable) = 0;

  void Upload(const std::string& key) {
    std::set<std::string> streamable;
    auto registered = store_->Register(lease_, key, Tensors(&streamable), "");
    ASSERT_TRUE(registered.ok()) << registered.status();
    ASSERT_TRUE(store_->Commit(lease_.id, registered->upload_id).ok());
  }

  // `key` attached on the host (the caller detaches it) and planned: the blocks stream, the
  // rest stays in a slab.
  Planned AttachAndPlan(const std::string& key) {
    absl::StatusOr<HostAttachment> attached = store_->AttachHost(lease_, key);
    EXPECT_TRUE(attached.ok()) << attached.status();
    std::set<std::string> streamable;
    Tensors(&streamable);
    absl::StatusOr<SessionPlan> plan = Plan(attached->component.tensors, streamable);
    EXPECT_TRUE(plan.ok()) << plan.status();
    return Planned{*std::move(attached), *std::move(plan)};
  }

  uint32_t HostSessionsOf(const std::string& key) {
    for (const auto& component : store_->List(DaemonCaller())) {
      if (component.cache_key == key) return component.sessions;
    }
    return 0;
  }

  TempDirForTest dir_;
  SessionRegistry registry_;  // outlives the store
  std::unique_ptr<HostPool> pool_;
  std::unique_ptr<ComponentStore> store_;
  Lease lease_{RandomId(), 1234, "test", absl::Now(), DaemonCaller()};
};

}  // namespace ddo

#endif  // DDO_DAEMON_STREAM_STREAM_TEST_BED_H_
