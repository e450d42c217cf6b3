// File: client-cpp/tests/consumer_daemon_test.cc
//
// The C++ RingConsumer against ddod's own copy worker (daemon/stream, host backend): a session
// planned and served by StreamWorker exactly as ddod serves a runner, its segments mapped by
// name as a runner process maps them. Every slot the consumer is handed must hold exactly its
// unit's bytes; the counters the consumer publishes must be what the session reads.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client-cpp/src/consumer/ring_consumer.h"
#include "daemon/common/random_id.h"
#include "daemon/policy/session_planner.h"
#include "daemon/policy/stream_settings.h"
#include "daemon/pool/host_pool.h"
#include "daemon/stream/control_block.h"
#include "daemon/stream/resident_slab.h"
#include "daemon/stream/session_device.h"
#include "daemon/stream/stream_session.h"
#include "daemon/stream/stream_worker.h"
#include "ddo/status.h"

namespace ddo {
namespace {

// A component of `units` Linear layers (weight and bias, distinct bytes) streamed by `worker`
// on the host backend, and a consumer over the session's segments.
class Session {
 public:
  Session(HostPool& pool, StreamWorker& worker, int units, uint32_t slots) : worker_(worker) {
    for (int u = 0; u < units; ++u) {
      TensorEntry weight;
      weight.name = absl::StrCat("blocks.", u, ".linear.weight");
      weight.dtype = DType::kF32;
      weight.shape = {64 + 16 * u, 256};
      weight.byte_size = 4ull * weight.shape[0] * weight.shape[1];
      tensors_.push_back(weight);
      TensorEntry bias = weight;
      bias.name = absl::StrCat("blocks.", u, ".linear.bias");
      bias.shape = {weight.shape[0]};
      bias.byte_size = 4ull * weight.shape[0];
      tensors_.push_back(bias);
      streamable_.insert(weight.name);
    }
    const uint64_t total = LayOut(tensors_);
    host_ = *pool.Allocate(total);
    for (uint64_t i = 0; i < total; ++i) host_->data()[i] = static_cast<char>((i * 131 + 7) % 251);
    bytes_ = ComponentBytes({host_});
    StreamSettings settings = *ParseStreamSettings(
        {{"DDO_SMALL_TENSOR_THRESHOLD_KB", "0"}, {"DDO_RING_SLOTS", absl::StrCat(slots)}});
    SessionPlan plan = *PlanSession(tensors_, streamable_, settings);
    const std::string prefix = pool.name_prefix();
    auto memory = *OpenHostSessionDevice(
        {plan.ring_bytes(), plan.ring_slots, prefix + "r" + RandomId().substr(0, 15)});
    std::shared_ptr<ResidentSlab> slab =
        *OpenHostSlab(prefix + "s" + RandomId().substr(0, 15), plan.slab_bytes);
    auto control = *ControlBlock::Create(prefix + "c" + RandomId().substr(0, 15),
                                         plan.ring_slots, plan.units.size(), plan.arena_bytes);
    session_ = std::make_shared<StreamSession>(RandomId(), "lease", "key", "cpu", tensors_,
                                               bytes_, std::move(plan), slab, false,
                                               std::move(memory), std::move(control));
    EXPECT_TRUE(session_->FillSlab().ok());
    DeviceExport resources;
    (void)session_->device_memory().Export(&resources);
    worker.Add(session_);
    // A runner's mappings: by name, read-write for the block and the doorbell.
    control_.emplace(*SharedSegment::Open(session_->control().name()));
    ring_.emplace(*SharedSegment::Open(resources.ring_shm));
    doorbell_.emplace(*SharedSegment::Open(worker.doorbell_name()));
  }

  ~Session() {
    worker_.Remove(session_->id());
    host_->MarkDiscarded();
  }

  consumer::RingConsumerOptions Options(std::vector<uint32_t> schedule = {}) const {
    const SessionPlan& plan = session_->plan();
    consumer::RingConsumerOptions options;
    options.control = reinterpret_cast<uint8_t*>(control_->data());
    options.control_bytes = control_->size();
    options.control_name = control_->name();
    options.doorbell = reinterpret_cast<uint8_t*>(doorbell_->data());
    options.doorbell_bytes = doorbell_->size();
    options.doorbell_name = doorbell_->name();
    options.slots = plan.ring_slots;
    options.units = static_cast<uint32_t>(plan.units.size());
    options.arena_bytes = plan.arena_bytes;
    for (const StreamUnit& unit : plan.units) {
      uint64_t span = 0;  // RingViews::span: the tensors' extent, what Python counts
      for (const PlannedTensor& placed : unit.tensors) {
        span = std::max(span, placed.offset + tensors_[placed.table_index].byte_size);
      }
      options.unit_spans.push_back(span);
    }
    options.schedule = std::move(schedule);
    return options;
  }

  // True when the ring holds exactly `unit`'s tensors at `offset`.
  bool HoldsUnit(uint32_t unit, uint64_t offset) const {
    const SessionPlan& plan = session_->plan();
    if (offset + plan.units[unit].span_bytes > plan.ring_bytes()) return false;
    for (const PlannedTensor& placed : plan.units[unit].tensors) {
      const TensorEntry& tensor = tensors_[placed.table_index];
      if (std::memcmp(ring_->data() + offset + placed.offset, bytes_.DataOf(tensor),
                      tensor.byte_size) != 0) {
        return false;
      }
    }
    return true;
  }

  StreamSession& session() { return *session_; }
  uint32_t units() const { return static_cast<uint32_t>(session_->plan().units.size()); }

 private:
  StreamWorker& worker_;
  std::vector<TensorEntry> tensors_;
  std::set<std::string> streamable_;
  std::shared_ptr<PoolSegment> host_;
  ComponentBytes bytes_;
  std::shared_ptr<StreamSession> session_;
  std::optional<SharedSegment> control_;
  std::optional<SharedSegment> ring_;
  std::optional<SharedSegment> doorbell_;
};

class ConsumerDaemonTest : public ::testing::Test {
 protected:
  ConsumerDaemonTest() {
    PoolOptions options;
    options.budget_bytes = 256ull << 20;
    options.name_namespace = PoolNamespace("/tmp/consumer-test-" + RandomId());
    pool_ = std::make_unique<HostPool>(options);
    worker_ = *StreamWorker::Start("cpu", pool_->name_prefix() + "b" + RandomId().substr(0, 15));
  }
  ~ConsumerDaemonTest() override { worker_.reset(); }

  std::unique_ptr<HostPool> pool_;
  std::unique_ptr<StreamWorker> worker_;
};

TEST_F(ConsumerDaemonTest, LearnsTheScheduleThenStreamsExactBytes) {
  constexpr uint32_t kUnits = 12;
  for (uint32_t slots : {2u, 3u}) {
    Session fixture(*pool_, *worker_, kUnits, slots);
    consumer::RingConsumer consumer(fixture.Options());
    const uint32_t k = consumer.block().slots();  // the planner may widen DDO_RING_SLOTS
    ASSERT_GE(k, 3u);
    ASSERT_LE(k, kUnits - 1);
    // The learning forward: every use out of schedule, consecutive repeats once.
    consumer.BeginForward();
    for (uint32_t unit = 0; unit < kUnits; ++unit) {
      for (int repeat = 0; repeat < 2; ++repeat) {
        ASSERT_TRUE(fixture.HoldsUnit(unit, consumer.Acquire(unit))) << "unit " << unit;
      }
    }
    std::vector<uint32_t> order = consumer.EndForward();
    ASSERT_EQ(order.size(), kUnits);
    ASSERT_TRUE(fixture.session().SetSchedule(order).ok());
    consumer.AdoptSchedule(order, order.size());
    worker_->Ring();
    for (int step = 0; step < 30; ++step) {
      consumer.BeginForward();
      for (uint32_t unit = 0; unit < kUnits; ++unit) {
        ASSERT_TRUE(fixture.HoldsUnit(unit, consumer.Acquire(unit)))
            << "K=" << k << " step " << step << " unit " << unit;
      }
      consumer.EndForward();
    }
    // A branch: 1 skipped; 2 again after its release is out of schedule (its next use is
    // kUnits - 1 ahead, beyond K - 1); then 3 is in schedule and 5 skips 4.
    consumer.BeginForward();
    ASSERT_TRUE(fixture.HoldsUnit(0, consumer.Acquire(0)));
    ASSERT_TRUE(fixture.HoldsUnit(2, consumer.Acquire(2)));
    consumer.Release(2);
    ASSERT_TRUE(fixture.HoldsUnit(2, consumer.Acquire(2)));
    ASSERT_TRUE(fixture.HoldsUnit(3, consumer.Acquire(3)));
    ASSERT_TRUE(fixture.HoldsUnit(5, consumer.Acquire(5)));
    consumer.EndForward();
    consumer.BeginForward();  // realigns to the next cycle
    for (uint32_t unit = 0; unit < kUnits; ++unit) {
      ASSERT_TRUE(fixture.HoldsUnit(unit, consumer.Acquire(unit)));
    }
    consumer.EndForward();

    const consumer::ConsumerStatistics& mine = consumer.statistics();
    EXPECT_EQ(mine.uses, kUnits + 30 * kUnits + 5 + kUnits);
    EXPECT_EQ(mine.sync_uses, kUnits + 1);
    EXPECT_EQ(mine.streamed_uses, 30 * kUnits + 4 + kUnits);
    EXPECT_EQ(mine.skipped_uses, 2u + (kUnits - 6));  // 1 and 4, then the rest of the cycle
    // What ddod read from the block: the same counters.
    const StreamSessionStats theirs = fixture.session().Stats();
    EXPECT_EQ(theirs.sync_uses, mine.sync_uses);
    EXPECT_EQ(theirs.consumed_uses, mine.streamed_uses);
    EXPECT_EQ(theirs.skipped_uses, mine.skipped_uses);
  }
}

TEST_F(ConsumerDaemonTest, AClosedSessionEndsAWait) {
  Session fixture(*pool_, *worker_, 3, 2);
  consumer::RingConsumer consumer(fixture.Options());
  fixture.session().Close(SessionState::kClosed);
  try {
    consumer.Acquire(0);
    FAIL() << "no exception";
  } catch (const SessionClosedError& error) {
    EXPECT_STREQ(error.what(),
                 "ddod closed this streaming session (it was detached, or ddod is stopping)");
  }
}

}  // namespace
}  // namespace ddo
