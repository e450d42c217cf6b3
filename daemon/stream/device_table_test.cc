// File: daemon/stream/device_table_test.cc
//
// DeviceTable on the host backend: which devices it resolves and how it names the others, one
// copy worker per device, room reserved before anything is allocated (a refusal names the sizes
// and holds nothing), and a returned room whose slab stays warm with its share of the budget,
// is found again by the next session of the same placement, and gives way when room is needed.
#include "daemon/stream/device_table.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "daemon/common/status_macros.h"
#include "daemon/policy/session_planner.h"
#include "daemon/stream/stream_test_bed.h"

namespace ddo {
namespace {

using ::testing::HasSubstr;

class DeviceTableTest : public StreamTestBed {
 protected:
  // Policy's planner: the blocks stream (a ring), the rest stays (a slab).
  absl::StatusOr<SessionPlan> Plan(const std::vector<TensorEntry>& tensors,
                                   const std::set<std::string>& streamable) override {
    DDO_ASSIGN_OR_RETURN(StreamSettings settings,
                         ParseStreamSettings({{"DDO_RESIDENT_MODULE_BUDGET_GB", "0"},
                                              {"DDO_SMALL_TENSOR_THRESHOLD_KB", "16"}}));
    return PlanSession(tensors, streamable, settings);
  }

  void TearDown() override {
    table_.reset();
    StreamTestBed::TearDown();
  }

  void Start(uint64_t host_budget_bytes, bool keep_slabs_warm, int host_devices = 1,
             HostPool* host_pool = nullptr) {
    DeviceTableOptions options;
    options.host_budget_bytes = host_budget_bytes;
    options.host_pool = host_pool;
    options.keep_slabs_warm = keep_slabs_warm;
    options.host_devices = host_devices;
    table_ = std::make_unique<DeviceTable>(GpuInventory{}, options, pool_->name_prefix());
  }

  StreamDevice Cpu() {
    absl::StatusOr<StreamDevice> device = table_->Resolve("cpu");
    EXPECT_TRUE(device.ok()) << device.status();
    return *device;
  }

  // What a session that held `room` for `planned` gives back when it closes.
  static ClosedRoom Closed(DeviceRoom& room, const Planned& planned, bool failed = false) {
    return ClosedRoom{"cpu", room.slab_key, room.slab, planned.plan.slab_bytes,
                      planned.attached.component.cache_key, planned.attached.component.owner_uid,
                      failed, std::move(room.reservation)};
  }

  void Detach(const Planned& planned) {
    EXPECT_TRUE(store_->Detach(planned.attached.session_id, lease_.caller).ok());
  }

  std::unique_ptr<DeviceTable> table_;
};

TEST_F(DeviceTableTest, ResolvesHostDevicesAndNamesTheOnesItHasNot) {
  Start(/*host_budget_bytes=*/8 * kMiB, /*keep_slabs_warm=*/false, /*host_devices=*/2);
  absl::StatusOr<StreamDevice> cpu = table_->Resolve("cpu:0");
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  EXPECT_EQ(cpu->label, "cpu");
  EXPECT_EQ(cpu->ordinal, -1);
  EXPECT_EQ(cpu->budget_bytes, 8 * kMiB);
  absl::StatusOr<StreamDevice> second = table_->Resolve("cpu:1");
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->label, "cpu:1");

  absl::StatusOr<StreamDevice> third = table_->Resolve("cpu:2");
  EXPECT_TRUE(absl::IsNotFound(third.status())) << third.status();
  EXPECT_THAT(third.status().message(), HasSubstr("ddod serves 2 host device(s) (cpu to cpu:1)"));
  absl::StatusOr<StreamDevice> gpu = table_->Resolve("cuda:0");
  EXPECT_TRUE(absl::IsUnavailable(gpu.status())) << gpu.status();
  EXPECT_THAT(gpu.status().message(), HasSubstr("device 'cpu' streams on the host backend"));
}

TEST_F(DeviceTableTest, OneWorkerPerDeviceStartedOnFirstUse) {
  Start(/*host_budget_bytes=*/0, /*keep_slabs_warm=*/false, /*host_devices=*/2);
  EXPECT_EQ(table_->FindWorker("cpu"), nullptr);
  absl::StatusOr<StreamWorker*> first = table_->WorkerFor(Cpu());
  ASSERT_TRUE(first.ok()) << first.status();
  absl::StatusOr<StreamWorker*> again = table_->WorkerFor(Cpu());
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*first, *again);
  EXPECT_EQ(table_->FindWorker("cpu"), *first);
  EXPECT_EQ(table_->FindWorker("cpu:1"), nullptr);
  table_->Shutdown();
  EXPECT_EQ(table_->FindWorker("cpu"), nullptr);
}

TEST_F(DeviceTableTest, RoomOverTheBudgetIsRefusedWithTheSizesAndHoldsNothing) {
  Start(/*host_budget_bytes=*/64 << 10, /*keep_slabs_warm=*/false);
  Upload("model");
  Planned planned = AttachAndPlan("model");
  absl::StatusOr<DeviceRoom> room = table_->ReserveRoom(Cpu(), planned.attached, planned.plan);
  ASSERT_TRUE(absl::IsResourceExhausted(room.status())) << room.status();
  EXPECT_THAT(room.status().message(), HasSubstr("a session of 'model' needs "));
  EXPECT_THAT(room.status().message(), HasSubstr("ddod's budget there is 64.0 KiB"));
  EXPECT_EQ(table_->reserved("cpu"), 0u);
  Detach(planned);
}

TEST_F(DeviceTableTest, AHostSessionsRoomIsCountedInThePoolAndRefusedWhenThePoolIsFull) {
  Start(/*host_budget_bytes=*/0, /*keep_slabs_warm=*/false, /*host_devices=*/1, pool_.get());
  Upload("model");
  Planned planned = AttachAndPlan("model");
  const uint64_t before = pool_->Usage().reserved_bytes;
  {
    absl::StatusOr<DeviceRoom> room = table_->ReserveRoom(Cpu(), planned.attached, planned.plan);
    ASSERT_TRUE(room.ok()) << room.status();
    EXPECT_EQ(pool_->Usage().held_bytes, planned.plan.device_bytes());
    EXPECT_EQ(pool_->Usage().reserved_bytes, before + planned.plan.device_bytes());
  }
  EXPECT_EQ(pool_->Usage().held_bytes, 0u) << "the room went with its reservation";

  // Fill the pool's budget with a segment (whole 2 MiB granules): the same room, under 2 MiB,
  // no longer fits in RAM.
  ASSERT_LT(planned.plan.device_bytes(), 2 * kMiB);
  const uint64_t free_bytes = pool_->Usage().budget_bytes - pool_->Usage().reserved_bytes;
  absl::StatusOr<std::shared_ptr<PoolSegment>> filler =
      pool_->Allocate(free_bytes / (2 * kMiB) * (2 * kMiB));
  ASSERT_TRUE(filler.ok()) << filler.status();
  absl::StatusOr<DeviceRoom> room = table_->ReserveRoom(Cpu(), planned.attached, planned.plan);
  ASSERT_TRUE(absl::IsResourceExhausted(room.status())) << room.status();
  EXPECT_THAT(room.status().message(), HasSubstr("counted in ddod's RAM budget of 64.0 MiB"));
  EXPECT_THAT(room.status().message(), HasSubstr("raise --ram-budget-gb or evict components"));
  EXPECT_EQ(table_->reserved("cpu"), 0u);
  EXPECT_EQ(pool_->Usage().held_bytes, 0u);
  (*filler)->MarkDiscarded();
  Detach(planned);
}

TEST_F(DeviceTableTest, AReturnedSlabStaysWarmWithItsShareAndServesTheNextSession) {
  Start(/*host_budget_bytes=*/0, /*keep_slabs_warm=*/true);
  Upload("model");
  Planned planned = AttachAndPlan("model");
  absl::StatusOr<DeviceRoom> room = table_->ReserveRoom(Cpu(), planned.attached, planned.plan);
  ASSERT_TRUE(room.ok()) << room.status();
  EXPECT_FALSE(room->slab_warm);
  EXPECT_EQ(table_->reserved("cpu"), planned.plan.device_bytes());
  std::optional<SlabRecipe> recipe =
      table_->RecipeOf(absl::StrCat(lease_.caller.uid, ":model"));
  ASSERT_TRUE(recipe.has_value());
  EXPECT_EQ(recipe->slab_bytes, planned.plan.slab_bytes);
  const ResidentSlab* slab = room->slab.get();

  EXPECT_TRUE(table_->ReturnRoom(Closed(*room, planned)));
  EXPECT_EQ(table_->warm_slab_count(), 1u);
  EXPECT_EQ(table_->reserved("cpu"), planned.plan.slab_bytes) << "the ring's share went back";

  absl::StatusOr<DeviceRoom> next = table_->ReserveRoom(Cpu(), planned.attached, planned.plan);
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_TRUE(next->slab_warm);
  EXPECT_EQ(next->slab.get(), slab);
  EXPECT_EQ(table_->warm_slab_count(), 0u);
  EXPECT_EQ(table_->reserved("cpu"), planned.plan.device_bytes()) << "counted once";
  next->reservation.Release();
  Detach(planned);
}

TEST_F(DeviceTableTest, NoSlabIsKeptWithoutWarmProcessOrFromAFailedSession) {
  Upload("model");
  for (const bool keep_slabs_warm : {false, true}) {
    Start(/*host_budget_bytes=*/0, keep_slabs_warm);
    Planned planned = AttachAndPlan("model");
    absl::StatusOr<DeviceRoom> room = table_->ReserveRoom(Cpu(), planned.attached, planned.plan);
    ASSERT_TRUE(room.ok()) << room.status();
    EXPECT_FALSE(table_->ReturnRoom(Closed(*room, planned, /*failed=*/keep_slabs_warm)));
    EXPECT_EQ(table_->warm_slab_count(), 0u);
    EXPECT_EQ(table_->reserved("cpu"), 0u);
    Detach(planned);
  }
}

TEST_F(DeviceTableTest, AWarmSlabGivesWayToANewSessionsRoom) {
  // Room for one session and half a slab more.
  Upload("a");
  Upload("b");
  Planned a = AttachAndPlan("a");
  Planned b = AttachAndPlan("b");
  Start(a.plan.device_bytes() + a.plan.slab_bytes / 2, /*keep_slabs_warm=*/true);
  absl::StatusOr<DeviceRoom> room = table_->ReserveRoom(Cpu(), a.attached, a.plan);
  ASSERT_TRUE(room.ok()) << room.status();
  ASSERT_TRUE(table_->ReturnRoom(Closed(*room, a)));
  absl::StatusOr<DeviceRoom> b_room = table_->ReserveRoom(Cpu(), b.attached, b.plan);
  ASSERT_TRUE(b_room.ok()) << b_room.status();
  EXPECT_FALSE(b_room->slab_warm);
  EXPECT_EQ(table_->warm_slab_count(), 0u);
  EXPECT_EQ(table_->reserved("cpu"), b.plan.device_bytes());
  b_room->reservation.Release();
  Detach(a);
  Detach(b);
}

}  // namespace
}  // namespace ddo
