// File: daemon/stream/stream_session_test.cc
//
// The streaming protocol end to end on the host backend: a copy worker serving sessions, and
// runners written against docs/streaming.md (mapping the segments by name, as a runner
// process does) that check every slot they use holds exactly the unit's bytes (read through
// each tensor's own segment: a derived version's tensors lie in several).
#include <gtest/gtest.h>

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "daemon/common/random_id.h"
#include "daemon/pool/host_pool.h"
#include "daemon/session/lease_registry.h"
#include "daemon/policy/session_planner.h"
#include "daemon/stream/control_block.h"
#include "daemon/stream/stream_session.h"
#include "daemon/stream/stream_worker.h"
#include "daemon/stream/unit_source.h"

namespace ddo {
namespace {

constexpr absl::Duration kPatience = absl::Seconds(10);

// A runner of the protocol, as a runner process implements it.
class TestRunner {
 public:
  // The names a runner gets in its AttachResponse: the control block, the ring, the doorbell.
  TestRunner(const std::string& control_shm, const std::string& ring_shm,
             const std::string& doorbell_shm, const SessionPlan& plan,
             const std::vector<TensorEntry>& tensors, ComponentBytes host)
      : plan_(plan), tensors_(tensors), host_(std::move(host)) {
    control_.emplace(*SharedSegment::Open(control_shm));
    ring_.emplace(*SharedSegment::Open(ring_shm));
    doorbell_.emplace(*SharedSegment::Open(doorbell_shm));
    slots_ = plan.ring_slots;
  }

  void SetSchedule(std::vector<uint32_t> schedule) { schedule_ = std::move(schedule); }

  // Uses `unit` the way the hot path does; returns how it was served.
  enum class Served { kInSchedule, kSkipped, kOutOfSchedule };
  absl::StatusOr<Served> Use(uint32_t unit) {
    Served served = Served::kInSchedule;
    uint32_t slot = slots_;
    uint64_t expected_tag = 0;
    if (!schedule_.empty()) {
      for (uint32_t ahead = 0; ahead < slots_; ++ahead) {
        if (schedule_[(use_ + ahead) % schedule_.size()] != unit) continue;
        if (ahead > 0) {
          served = Served::kSkipped;
          use_ += ahead;
          Publish(control_layout::kConsumedOffset, use_);
        }
        slot = static_cast<uint32_t>(use_ % slots_);
        expected_tag = use_;
        break;
      }
    }
    if (slot == slots_) {
      served = Served::kOutOfSchedule;
      expected_tag = ++sync_requests_;
      U32(control_layout::kSyncUnitOffset).store(unit);
      Publish(control_layout::kSyncRequestOffset, expected_tag);
      RingDoorbell();
      if (!WaitAtLeast(control_layout::kSyncDoneOffset, expected_tag)) return Closed();
    } else if (!WaitAtLeast(control_layout::kReadyOffset, use_ + 1)) {
      return Closed();
    }
    if (U64(control_layout::kSlotUseOffset + 8ull * slot).load() != expected_tag) {
      return absl::InternalError(absl::StrCat("slot ", slot, " holds the wrong use"));
    }
    const uint64_t ring_offset = U64(control_layout::kSlotUseOffset + 8ull * (slots_ + 1 + slot)).load();
    const StreamUnit& planned = plan_.units[unit];
    if (ring_offset + planned.span_bytes > plan_.ring_bytes()) {
      return absl::InternalError(absl::StrCat("slot ", slot, " lies outside the ring"));
    }
    for (const PlannedTensor& placed : planned.tensors) {
      const TensorEntry& tensor = tensors_[placed.table_index];
      if (std::memcmp(ring_->data() + ring_offset + placed.offset, host_.DataOf(tensor),
                      tensor.byte_size) != 0) {
        return absl::InternalError(absl::StrCat("slot ", slot, " does not hold ", tensor.name));
      }
    }
    if (served != Served::kOutOfSchedule) {
      ++use_;
      Publish(control_layout::kConsumedOffset, use_);
    }
    return served;
  }

  uint32_t state() { return U32(control_layout::kStateOffset).load(); }

 private:
  absl::Status Closed() {
    return absl::CancelledError(absl::StrCat("session state ", state()));
  }
  std::atomic<uint64_t>& U64(uint64_t offset) {
    return *reinterpret_cast<std::atomic<uint64_t>*>(control_->data() + offset);
  }
  std::atomic<uint32_t>& U32(uint64_t offset) {
    return *reinterpret_cast<std::atomic<uint32_t>*>(control_->data() + offset);
  }
  void Publish(uint64_t offset, uint64_t value) {
    U64(offset).store(value);
    RingDoorbell();
  }
  void RingDoorbell() {
    auto* seq = reinterpret_cast<std::atomic<uint32_t>*>(doorbell_->data() + doorbell_layout::kSeqOffset);
    seq->fetch_add(1);
    FutexWakeAll(seq);
  }
  bool WaitAtLeast(uint64_t offset, uint64_t value) {
    const absl::Time give_up = absl::Now() + kPatience;
    while (U64(offset).load() < value) {
      if (state() != 0 || absl::Now() > give_up) return false;
      U32(control_layout::kRunnerWaitingOffset).store(1);
      const uint32_t low = static_cast<uint32_t>(U64(offset).load());
      if (U64(offset).load() < value) FutexWait(LowWord(&U64(offset)), low, absl::Milliseconds(2));
      U32(control_layout::kRunnerWaitingOffset).store(0);
    }
    return true;
  }

  const SessionPlan& plan_;
  const std::vector<TensorEntry>& tensors_;
  const ComponentBytes host_;
  std::optional<SharedSegment> control_;
  std::optional<SharedSegment> ring_;
  std::optional<SharedSegment> doorbell_;
  uint32_t slots_ = 0;
  std::vector<uint32_t> schedule_;
  uint64_t use_ = 0;
  uint64_t sync_requests_ = 0;
};

// A component of `units` Linear weights (each distinct bytes) in a pool segment, and a
// session streaming it on the host backend. `derived`: laid out as a derived version, the
// weights of odd units and the biases of even ones in a second segment (its base's, other
// bytes at the same offsets), so that a copy from the wrong segment shows. With
// `file_readers`: the session reads the component from a file holding the segment's bytes (the
// file tier) on those threads, through staging buffers counted in `pool`; the runner still
// checks against the segment.
class StreamFixture {
 public:
  StreamFixture(HostPool& pool, StreamWorker& worker, int units, uint32_t slots,
                bool derived = false, FileReadPool* file_readers = nullptr) {
    const bool from_files = file_readers != nullptr;
    for (int u = 0; u < units; ++u) {
      TensorEntry weight;
      weight.name = absl::StrCat("blocks.", u, ".linear.weight");
      weight.dtype = DType::kF32;
      weight.shape = {64 + 16 * u, 256};  // units of different sizes
      weight.byte_size = 4ull * weight.shape[0] * weight.shape[1];
      tensors.push_back(weight);
      TensorEntry bias = weight;
      bias.name = absl::StrCat("blocks.", u, ".linear.bias");
      bias.shape = {weight.shape[0]};
      bias.byte_size = 4ull * weight.shape[0];
      tensors.push_back(bias);
      streamable.insert(weight.name);
    }
    const uint64_t total = LayOut(tensors);
    host = *pool.Allocate(total);
    for (uint64_t i = 0; i < total; ++i) host->data()[i] = static_cast<char>((i * 131 + 7) % 251);
    std::vector<std::shared_ptr<PoolSegment>> segments{host};
    if (derived) {
      base = *pool.Allocate(total);
      for (uint64_t i = 0; i < total; ++i) {
        base->data()[i] = static_cast<char>((i * 37 + 101) % 241);
      }
      segments.push_back(base);
      for (size_t t = 0; t < tensors.size(); ++t) {
        const bool odd_unit = (t / 2) % 2 == 1;
        const bool bias = t % 2 == 1;
        tensors[t].segment = odd_unit != bias ? 1 : 0;
      }
    }
    bytes = ComponentBytes(segments);
    ComponentBytes session_bytes = bytes;
    if (from_files) session_bytes = FileCopyOf(total);
    StreamSettings settings = *ParseStreamSettings(
        {{"DDO_SMALL_TENSOR_THRESHOLD_KB", "0"}, {"DDO_RING_SLOTS", absl::StrCat(slots)}});
    SessionPlan plan = *PlanSession(tensors, streamable, settings);
    SessionDeviceSpec spec{plan.ring_bytes(), plan.ring_slots,
                           pool.name_prefix() + "r" + RandomId().substr(0, 15)};
    auto memory = *OpenHostSessionDevice(spec);
    std::shared_ptr<ResidentSlab> slab =
        *OpenHostSlab(pool.name_prefix() + "s" + RandomId().substr(0, 15), plan.slab_bytes);
    auto control = *ControlBlock::Create(pool.name_prefix() + "c" + RandomId().substr(0, 15),
                                         plan.ring_slots, plan.units.size(), plan.arena_bytes);
    FileReading reading;
    if (from_files) {
      reading = FileReading{*StagingFor(session_bytes, plan, kFileStagingBuffers, /*pin=*/false,
                                        &pool),
                            file_readers,
                            [&worker] { worker.Ring(); }};
    }
    session = std::make_shared<StreamSession>(
        RandomId(), "lease", "key", "cpu", tensors, session_bytes, std::move(plan), slab,
        /*slab_filled=*/false, std::move(memory), std::move(control), std::move(reading));
    EXPECT_TRUE(session->FillSlab().ok());
    (void)session->device_memory().Export(&memory_export);
    (void)session->slab()->Export(&memory_export);
    worker.Add(session);
    runner = std::make_unique<TestRunner>(session->control().name(), memory_export.ring_shm,
                                          worker.doorbell_name(), session->plan(), tensors, bytes);
  }

  ~StreamFixture() {
    // The component's segments leave /dev/shm.
    if (host != nullptr) host->MarkDiscarded();
    if (base != nullptr) base->MarkDiscarded();
    if (!file_path.empty()) ::unlink(file_path.c_str());
  }

  // The component's bytes as a file-tier component has them: a file holding the segment's
  // first `total` bytes, each tensor at its segment offset.
  ComponentBytes FileCopyOf(uint64_t total) {
    file_path = absl::StrCat("/tmp/ddo-stream-test-", RandomId().substr(0, 12));
    std::FILE* file = std::fopen(file_path.c_str(), "wb");
    EXPECT_NE(file, nullptr);
    EXPECT_EQ(std::fwrite(host->data(), 1, total, file), total);
    std::fclose(file);
    SafetensorsSet set;
    SafetensorsFile& only = set.files.emplace_back();
    only.name = file_path;
    only.fd = UniqueFd(::open(file_path.c_str(), O_RDONLY | O_CLOEXEC));
    for (const TensorEntry& tensor : tensors) {
      only.tensors.push_back({tensor.name, tensor.dtype, tensor.shape, tensor.offset,
                              tensor.byte_size});
    }
    auto files = BackingFiles::TakeFrom(set);
    EXPECT_TRUE(files.ok()) << files.status();
    return ComponentBytes(std::make_shared<const BackingFiles>(*std::move(files)));
  }

  std::vector<TensorEntry> tensors;
  std::set<std::string> streamable;
  std::shared_ptr<PoolSegment> host;
  std::shared_ptr<PoolSegment> base;  // `derived` only
  ComponentBytes bytes;
  std::shared_ptr<StreamSession> session;
  DeviceExport memory_export;
  std::unique_ptr<TestRunner> runner;
  std::string file_path;  // `from_files` only
};

class StreamSessionTest : public ::testing::Test {
 protected:
  StreamSessionTest() {
    PoolOptions options;
    options.budget_bytes = 256ull << 20;
    options.name_namespace = PoolNamespace("/tmp/stream-test-" + RandomId());
    pool_ = std::make_unique<HostPool>(options);
    worker_ = *StreamWorker::Start("cpu", pool_->name_prefix() + "b" + RandomId().substr(0, 15));
    readers_ = std::make_unique<FileReadPool>(3);
  }
  ~StreamSessionTest() override {
    readers_.reset();  // before the worker whose doorbell the reads ring
    worker_.reset();
  }

  std::unique_ptr<HostPool> pool_;
  std::unique_ptr<StreamWorker> worker_;
  std::unique_ptr<FileReadPool> readers_;

  // Whether the pool's held bytes come back to 0 soon (reads still running keep their staging).
  bool HeldBytesReturn() {
    const absl::Time give_up = absl::Now() + kPatience;
    while (pool_->Usage().held_bytes != 0 && absl::Now() < give_up) {
      absl::SleepFor(absl::Milliseconds(1));
    }
    return pool_->Usage().held_bytes == 0;
  }
};

std::vector<uint32_t> Iota(uint32_t n) {
  std::vector<uint32_t> order(n);
  for (uint32_t i = 0; i < n; ++i) order[i] = i;
  return order;
}

TEST_F(StreamSessionTest, RingWrapsAroundOverManyStepsWithExactBytes) {
  for (uint32_t slots : {2u, 3u, 5u}) {
    StreamFixture fixture(*pool_, *worker_, 7, slots);
    ASSERT_TRUE(fixture.session->SetSchedule(Iota(7)).ok());
    fixture.runner->SetSchedule(Iota(7));
    worker_->Ring();
    for (int step = 0; step < 40; ++step) {
      for (uint32_t unit = 0; unit < 7; ++unit) {
        auto served = fixture.runner->Use(unit);
        ASSERT_TRUE(served.ok()) << served.status() << " step " << step << " unit " << unit;
        EXPECT_EQ(*served, TestRunner::Served::kInSchedule);
      }
    }
    StreamSessionStats stats = fixture.session->Stats();
    EXPECT_GE(stats.produced_uses, 40u * 7);
    EXPECT_LE(stats.produced_uses, 40u * 7 + fixture.session->plan().ring_slots);
    EXPECT_EQ(stats.sync_uses, 0u);
    worker_->Remove(fixture.session->id());
  }
}

TEST_F(StreamSessionTest, LearningForwardThenOutOfScheduleUsesAreServedCorrectly) {
  StreamFixture fixture(*pool_, *worker_, 6, 2);
  // No schedule yet: the learning forward is served out of schedule.
  for (uint32_t unit = 0; unit < 6; ++unit) {
    auto served = fixture.runner->Use(unit);
    ASSERT_TRUE(served.ok()) << served.status();
    EXPECT_EQ(*served, TestRunner::Served::kOutOfSchedule);
  }
  ASSERT_TRUE(fixture.session->SetSchedule(Iota(6)).ok());
  EXPECT_EQ(fixture.session->SetSchedule(Iota(6)).code(), absl::StatusCode::kFailedPrecondition);
  fixture.runner->SetSchedule(Iota(6));
  worker_->Ring();
  // A forward that uses 0, 1, then 4 (skipping 2 and 3: within the ring, so skipped), 5, then
  // 5 again (not among the next uses, 0..4: out of schedule).
  ASSERT_LE(fixture.session->plan().ring_slots, 5u);  // the runner looks ahead K - 1 uses
  for (uint32_t unit : {0u, 1u}) EXPECT_EQ(*fixture.runner->Use(unit), TestRunner::Served::kInSchedule);
  EXPECT_EQ(*fixture.runner->Use(4), TestRunner::Served::kSkipped);
  EXPECT_EQ(*fixture.runner->Use(5), TestRunner::Served::kInSchedule);
  EXPECT_EQ(*fixture.runner->Use(5), TestRunner::Served::kOutOfSchedule);
  // The next cycles are in schedule again.
  for (int step = 0; step < 5; ++step) {
    for (uint32_t unit = 0; unit < 6; ++unit) {
      auto served = fixture.runner->Use(unit);
      ASSERT_TRUE(served.ok()) << served.status();
      EXPECT_EQ(*served, TestRunner::Served::kInSchedule);
    }
  }
  EXPECT_EQ(fixture.session->Stats().sync_uses, 7u);
  worker_->Remove(fixture.session->id());
}

TEST_F(StreamSessionTest, TwoSessionsShareTheWorker) {
  StreamFixture first(*pool_, *worker_, 5, 2);
  StreamFixture second(*pool_, *worker_, 9, 3);
  ASSERT_TRUE(first.session->SetSchedule(Iota(5)).ok());
  ASSERT_TRUE(second.session->SetSchedule(Iota(9)).ok());
  first.runner->SetSchedule(Iota(5));
  second.runner->SetSchedule(Iota(9));
  worker_->Ring();
  auto run = [](StreamFixture* fixture, uint32_t units, int steps) {
    for (int step = 0; step < steps; ++step) {
      for (uint32_t unit = 0; unit < units; ++unit) {
        auto served = fixture->runner->Use(unit);
        ASSERT_TRUE(served.ok()) << served.status();
      }
    }
  };
  std::thread a(run, &first, 5, 60);
  std::thread b(run, &second, 9, 40);
  a.join();
  b.join();
  EXPECT_GE(first.session->Stats().produced_uses, 300u);
  EXPECT_GE(second.session->Stats().produced_uses, 360u);
  worker_->Remove(first.session->id());
  worker_->Remove(second.session->id());
}

TEST_F(StreamSessionTest, AStalledRunnerDoesNotBlockAnother) {
  StreamFixture stalled(*pool_, *worker_, 4, 2);
  StreamFixture running(*pool_, *worker_, 4, 2);
  ASSERT_TRUE(stalled.session->SetSchedule(Iota(4)).ok());
  ASSERT_TRUE(running.session->SetSchedule(Iota(4)).ok());
  running.runner->SetSchedule(Iota(4));
  worker_->Ring();
  // `stalled` never consumes: its ring fills and stays full (units of 64 and 80 KiB fill an
  // arena of 2 x 112 KiB; the next, 96 KiB, does not fit).
  for (int step = 0; step < 30; ++step) {
    for (uint32_t unit = 0; unit < 4; ++unit) ASSERT_TRUE(running.runner->Use(unit).ok());
  }
  EXPECT_EQ(stalled.session->Stats().produced_uses, 2u);
  worker_->Remove(stalled.session->id());
  worker_->Remove(running.session->id());
}

TEST_F(StreamSessionTest, SmallUnitsPackIntoTheArena) {
  // Units of 64, 80, ..., 160 KiB; an arena of 2 x 160 KiB holds the first three at once
  // (240 KiB), where slots of the largest unit would hold two.
  StreamFixture fixture(*pool_, *worker_, 7, 2);
  const SessionPlan& plan = fixture.session->plan();
  EXPECT_EQ(plan.arena_bytes, 2 * plan.slot_bytes);
  EXPECT_GE(plan.ring_slots, 4u);  // the arena / the smallest unit
  ASSERT_TRUE(fixture.session->SetSchedule(Iota(7)).ok());
  worker_->Ring();
  const absl::Time give_up = absl::Now() + kPatience;
  while (fixture.session->Stats().produced_uses < 3 && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  absl::SleepFor(absl::Milliseconds(20));  // nothing more fits until the runner moves
  EXPECT_EQ(fixture.session->Stats().produced_uses, 3u);
  // The runner then streams many cycles with exact bytes, through wrap-arounds of the arena.
  fixture.runner->SetSchedule(Iota(7));
  for (int step = 0; step < 25; ++step) {
    for (uint32_t unit = 0; unit < 7; ++unit) {
      auto served = fixture.runner->Use(unit);
      ASSERT_TRUE(served.ok()) << served.status() << " step " << step << " unit " << unit;
      EXPECT_EQ(*served, TestRunner::Served::kInSchedule);
    }
  }
  worker_->Remove(fixture.session->id());
}

TEST_F(StreamSessionTest, ADerivedVersionStreamsEachTensorFromItsOwnSegment) {
  StreamFixture fixture(*pool_, *worker_, 6, 3, /*derived=*/true);
  // The slab: every resident tensor (the biases) holds the bytes of its own segment.
  auto slab = SharedSegment::Open(fixture.memory_export.resident_slab_shm);
  ASSERT_TRUE(slab.ok()) << slab.status();
  const SessionPlan& plan = fixture.session->plan();
  ASSERT_EQ(plan.resident.size(), 6u);
  int from_base = 0;
  for (const PlannedTensor& placed : plan.resident) {
    const TensorEntry& tensor = fixture.tensors[placed.table_index];
    from_base += tensor.segment == 1 ? 1 : 0;
    EXPECT_EQ(std::memcmp(slab->data() + placed.offset, fixture.bytes.DataOf(tensor),
                          tensor.byte_size),
              0)
        << tensor.name;
    // Not the other segment's bytes at the same offset.
    const char* other = (tensor.segment == 0 ? fixture.base : fixture.host)->data() + tensor.offset;
    EXPECT_NE(std::memcmp(slab->data() + placed.offset, other, tensor.byte_size), 0) << tensor.name;
  }
  EXPECT_EQ(from_base, 3);
  // The ring: the runner checks every unit against each weight's own segment.
  ASSERT_TRUE(fixture.session->SetSchedule(Iota(6)).ok());
  fixture.runner->SetSchedule(Iota(6));
  worker_->Ring();
  for (int step = 0; step < 10; ++step) {
    for (uint32_t unit = 0; unit < 6; ++unit) {
      auto served = fixture.runner->Use(unit);
      ASSERT_TRUE(served.ok()) << served.status() << " step " << step << " unit " << unit;
      EXPECT_EQ(*served, TestRunner::Served::kInSchedule);
    }
  }
  worker_->Remove(fixture.session->id());
}

TEST_F(StreamSessionTest, ClosingWakesAWaitingRunner) {
  StreamFixture fixture(*pool_, *worker_, 3, 2);
  fixture.runner->SetSchedule(Iota(3));  // ddod never gets it: the runner waits
  absl::Status result;
  std::thread waiter([&] { result = fixture.runner->Use(0).status(); });
  absl::SleepFor(absl::Milliseconds(50));
  const absl::Time closed = absl::Now();
  worker_->Remove(fixture.session->id());
  fixture.session->Close(SessionState::kClosed);
  waiter.join();
  EXPECT_LT(absl::Now() - closed, absl::Seconds(1));
  EXPECT_EQ(result.code(), absl::StatusCode::kCancelled) << result;
  EXPECT_EQ(fixture.runner->state(), static_cast<uint32_t>(SessionState::kClosed));
}

TEST_F(StreamSessionTest, AFileTierComponentStreamsExactBytesThroughStaging) {
  for (uint32_t slots : {2u, 5u}) {
    StreamFixture fixture(*pool_, *worker_, 7, slots, /*derived=*/false, readers_.get());
    // The staging buffers are RAM under the pool's budget while the session lives.
    const uint64_t staging = fixture.session->Stats().staging_bytes;
    EXPECT_EQ(staging, kFileStagingBuffers * fixture.session->plan().slot_bytes);
    EXPECT_EQ(pool_->Usage().held_bytes, staging);
    ASSERT_TRUE(fixture.session->SetSchedule(Iota(7)).ok());
    fixture.runner->SetSchedule(Iota(7));
    worker_->Ring();
    for (int step = 0; step < 30; ++step) {
      for (uint32_t unit = 0; unit < 7; ++unit) {
        auto served = fixture.runner->Use(unit);
        ASSERT_TRUE(served.ok()) << served.status() << " step " << step << " unit " << unit;
        EXPECT_EQ(*served, TestRunner::Served::kInSchedule);
      }
    }
    const StreamSessionStats stats = fixture.session->Stats();
    EXPECT_GE(stats.file_bytes_read, stats.streamed_bytes - fixture.session->plan().streamed_bytes);
    EXPECT_GE(stats.streamed_bytes, 30 * fixture.session->plan().streamed_bytes);
    worker_->Remove(fixture.session->id());
    fixture.session->Close(SessionState::kClosed);
    fixture.session.reset();
    EXPECT_TRUE(HeldBytesReturn()) << "the staging went back once the reads ahead ended";
  }
}

TEST_F(StreamSessionTest, AFileTierComponentServesOutOfScheduleUnitsAndFillsItsSlab) {
  StreamFixture fixture(*pool_, *worker_, 6, 2, /*derived=*/false, readers_.get());
  // The slab (the biases) was filled from the file.
  auto slab = SharedSegment::Open(fixture.memory_export.resident_slab_shm);
  ASSERT_TRUE(slab.ok()) << slab.status();
  for (const PlannedTensor& placed : fixture.session->plan().resident) {
    const TensorEntry& tensor = fixture.tensors[placed.table_index];
    EXPECT_EQ(std::memcmp(slab->data() + placed.offset, fixture.bytes.DataOf(tensor),
                          tensor.byte_size), 0) << tensor.name;
  }
  for (uint32_t unit = 0; unit < 6; ++unit) {
    auto served = fixture.runner->Use(unit);
    ASSERT_TRUE(served.ok()) << served.status();
    EXPECT_EQ(*served, TestRunner::Served::kOutOfSchedule);
  }
  worker_->Remove(fixture.session->id());
}

TEST_F(StreamSessionTest, AFileTierRunnerThatSkipsUsesGetsTheRightBytes) {
  StreamFixture fixture(*pool_, *worker_, 6, 3, /*derived=*/false, readers_.get());
  ASSERT_TRUE(fixture.session->SetSchedule(Iota(6)).ok());
  fixture.runner->SetSchedule(Iota(6));
  worker_->Ring();
  int skipped = 0;
  for (int step = 0; step < 8; ++step) {
    // Each forward skips units within the ring's reach (their reads, started ahead, are
    // dropped) and comes back to one.
    for (uint32_t unit : {0u, 1u, 3u, 4u, 5u, 2u}) {
      auto served = fixture.runner->Use(unit);
      ASSERT_TRUE(served.ok()) << served.status() << " step " << step << " unit " << unit;
      skipped += *served == TestRunner::Served::kSkipped ? 1 : 0;
    }
  }
  EXPECT_GE(skipped, 8);
  worker_->Remove(fixture.session->id());
  fixture.session->Close(SessionState::kClosed);
  fixture.session.reset();
  EXPECT_TRUE(HeldBytesReturn()) << "the staging went back, dropped reads too";
}

// The deadlock this guards against: reads ahead holding every staging buffer while the ring is
// full and the runner waits on an out-of-schedule unit, which needs a buffer too.
TEST_F(StreamSessionTest, AnOutOfScheduleFileUnitIsServedWhileTheRingIsFull) {
  StreamFixture fixture(*pool_, *worker_, 8, 2, /*derived=*/false, readers_.get());
  ASSERT_TRUE(fixture.session->SetSchedule(Iota(8)).ok());
  fixture.runner->SetSchedule(Iota(8));
  worker_->Ring();
  ASSERT_EQ(*fixture.runner->Use(0), TestRunner::Served::kInSchedule);
  // Let the ring fill and the reads ahead take what they may.
  absl::SleepFor(absl::Milliseconds(100));
  ASSERT_LT(fixture.session->plan().ring_slots, 7u);
  auto again = fixture.runner->Use(0);  // next due 8 uses on: out of schedule
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, TestRunner::Served::kOutOfSchedule);
  for (uint32_t unit = 1; unit < 8; ++unit) {
    auto served = fixture.runner->Use(unit);
    ASSERT_TRUE(served.ok()) << served.status();
  }
  worker_->Remove(fixture.session->id());
}

TEST_F(StreamSessionTest, AFileThatShrankFailsTheSessionNotTheDaemon) {
  StreamFixture fixture(*pool_, *worker_, 6, 2, /*derived=*/false, readers_.get());
  ASSERT_EQ(::truncate(fixture.file_path.c_str(), 100), 0);
  ASSERT_TRUE(fixture.session->SetSchedule(Iota(6)).ok());
  fixture.runner->SetSchedule(Iota(6));
  worker_->Ring();
  absl::Status result;
  for (int use = 0; use < 12 && result.ok(); ++use) result = fixture.runner->Use(use % 6).status();
  EXPECT_EQ(result.code(), absl::StatusCode::kCancelled) << result;
  EXPECT_EQ(fixture.runner->state(), static_cast<uint32_t>(SessionState::kFailed));
  EXPECT_TRUE(fixture.session->Stats().failed);
  worker_->Remove(fixture.session->id());
}

}  // namespace
}  // namespace ddo
