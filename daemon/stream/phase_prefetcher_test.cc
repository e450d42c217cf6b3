// File: daemon/stream/phase_prefetcher_test.cc
//
// PhasePrefetcher on the host backend, over a DeviceTable that remembered a component's last
// placement: a phase frees the caller's warm slabs it does not keep, fills a slab of the last
// placement of what it prefetches (giving the component back), and says why it filled none:
// no earlier session, the slab already on the device (warm or held by an open session), no room.
// Another user's slabs and placements are neither touched nor named.
#include "daemon/stream/phase_prefetcher.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "daemon/common/status_macros.h"
#include "daemon/policy/session_planner.h"
#include "daemon/stream/stream_test_bed.h"

namespace ddo {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;

class PhasePrefetcherTest : public StreamTestBed {
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
    prefetcher_.reset();
    table_.reset();
    StreamTestBed::TearDown();
  }

  // Starts the table and the prefetcher, and leaves the recipe of one session of "model" (its
  // room given back at once). Returns the placement's slab bytes.
  uint64_t StartWithRecipe(uint64_t host_budget_bytes) {
    DeviceTableOptions options;
    options.host_budget_bytes = host_budget_bytes;
    options.keep_slabs_warm = true;
    table_ = std::make_unique<DeviceTable>(GpuInventory{}, options, pool_->name_prefix());
    prefetcher_ = std::make_unique<PhasePrefetcher>(
        *store_, *table_, [this](const std::string& key) { return in_use_.count(key) != 0; });
    Upload("model");
    Planned planned = AttachAndPlan("model");
    absl::StatusOr<StreamDevice> cpu = table_->Resolve("cpu");
    EXPECT_TRUE(cpu.ok()) << cpu.status();
    absl::StatusOr<DeviceRoom> room = table_->ReserveRoom(*cpu, planned.attached, planned.plan);
    EXPECT_TRUE(room.ok()) << room.status();
    slab_key_ = room->slab_key;
    EXPECT_TRUE(store_->Detach(planned.attached.session_id, lease_.caller).ok());
    return planned.plan.slab_bytes;
  }

  std::unique_ptr<DeviceTable> table_;
  std::unique_ptr<PhasePrefetcher> prefetcher_;
  std::set<std::string> in_use_;  // slab keys open sessions hold
  std::string slab_key_;
};

TEST_F(PhasePrefetcherTest, FillsTheLastPlacementAndReleasesWhatThePhaseDoesNotKeep) {
  const uint64_t slab_bytes = StartWithRecipe(/*host_budget_bytes=*/0);
  EXPECT_EQ(table_->reserved("cpu"), 0u);

  PhaseResult prefetched = prefetcher_->Begin(lease_, {"model"}, {}, {"model", "other"});
  EXPECT_EQ(prefetched.prefetched_bytes, slab_bytes);
  EXPECT_THAT(prefetched.notes, Contains(HasSubstr("'model': prefetched its ")));
  EXPECT_THAT(prefetched.notes, Contains(HasSubstr("'other': no earlier session of yours")));
  EXPECT_EQ(table_->warm_slab_count(), 1u);
  EXPECT_TRUE(table_->HasWarm(slab_key_));
  EXPECT_EQ(table_->reserved("cpu"), slab_bytes);
  EXPECT_EQ(HostSessionsOf("model"), 0u) << "the prefetch gave the component back";

  PhaseResult again = prefetcher_->Begin(lease_, {"model"}, {}, {"model"});
  EXPECT_EQ(again.prefetched_bytes, 0u);
  EXPECT_THAT(again.notes, Contains(HasSubstr("its slab is already on cpu")));

  PhaseResult released = prefetcher_->Begin(lease_, {}, {}, {});
  EXPECT_EQ(released.released_bytes, slab_bytes);
  EXPECT_THAT(released.notes, Contains(HasSubstr("released the warm slab of 'model' on cpu")));
  EXPECT_EQ(table_->reserved("cpu"), 0u);
}

TEST_F(PhasePrefetcherTest, ASlabAnOpenSessionHoldsIsNotFilledAgain) {
  StartWithRecipe(/*host_budget_bytes=*/0);
  in_use_.insert(slab_key_);
  PhaseResult result = prefetcher_->Begin(lease_, {"model"}, {}, {"model"});
  EXPECT_EQ(result.prefetched_bytes, 0u);
  EXPECT_THAT(result.notes, Contains(HasSubstr("its slab is already on cpu")));
  EXPECT_EQ(table_->reserved("cpu"), 0u);
}

TEST_F(PhasePrefetcherTest, NoRoomIsSaidWithTheSizes) {
  StartWithRecipe(/*host_budget_bytes=*/64 * kMiB);
  std::optional<DeviceBudget::Reservation> taken = table_->TryReserve("cpu", 64 * kMiB, 64 * kMiB);
  ASSERT_TRUE(taken.has_value());
  PhaseResult result = prefetcher_->Begin(lease_, {"model"}, {}, {"model"});
  EXPECT_EQ(result.prefetched_bytes, 0u);
  EXPECT_THAT(result.notes, Contains(HasSubstr("no room for its ")));
  EXPECT_THAT(result.notes, Contains(HasSubstr("(ddod's budget 64.0 MiB, held 64.0 MiB)")));
}

TEST_F(PhasePrefetcherTest, AnotherUsersSlabsAndPlacementsAreNeitherTouchedNorNamed) {
  const uint64_t slab_bytes = StartWithRecipe(/*host_budget_bytes=*/0);
  ASSERT_EQ(prefetcher_->Begin(lease_, {"model"}, {}, {"model"}).prefetched_bytes, slab_bytes);

  Lease other = lease_;
  other.id = RandomId();
  other.caller.uid = lease_.caller.uid + 1;
  other.caller.admin = false;
  PhaseResult result = prefetcher_->Begin(other, {}, {}, {"model"});
  EXPECT_EQ(result.released_bytes, 0u);
  EXPECT_EQ(result.prefetched_bytes, 0u);
  EXPECT_THAT(result.notes,
              testing::ElementsAre("'model': no earlier session of yours shows its placement"));
  EXPECT_EQ(table_->warm_slab_count(), 1u);
}

}  // namespace
}  // namespace ddo
