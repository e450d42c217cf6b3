// File: daemon/stream/schedule_memory_test.cc
#include "daemon/stream/schedule_memory.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace ddo {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::Pair;
using ::testing::UnorderedElementsAre;

TensorEntry Named(std::string name) {
  TensorEntry entry;
  entry.name = std::move(name);
  return entry;
}

TEST(ScheduleMemoryTest, ASchedulesIsKnownForItsComponentAndPlanOnly) {
  ScheduleMemory memory;
  memory.RememberSchedule({1000, "flux", ""}, "plan-a", {0, 1, 2});
  EXPECT_THAT(memory.Known({1000, "flux", ""}, "plan-a").order, ElementsAre(0, 1, 2));
  EXPECT_THAT(memory.Known({1000, "flux", ""}, "plan-b").order, IsEmpty());
  // Keys are names inside each uid: another user's "flux" learned nothing.
  EXPECT_THAT(memory.Known({1001, "flux", ""}, "plan-a").order, IsEmpty());
}

TEST(ScheduleMemoryTest, ADerivedVersionTakesItsBasesScheduleUntilItHasItsOwn) {
  ScheduleMemory memory;
  memory.RememberSchedule({1000, "flux", ""}, "plan", {2, 1});
  KnownSchedule known = memory.Known({1000, "flux+lora", "flux"}, "plan");
  EXPECT_THAT(known.order, ElementsAre(2, 1));
  EXPECT_TRUE(known.from_base);
  memory.RememberSchedule({1000, "flux+lora", ""}, "plan", {1, 2});
  known = memory.Known({1000, "flux+lora", "flux"}, "plan");
  EXPECT_THAT(known.order, ElementsAre(1, 2));
  EXPECT_FALSE(known.from_base);
}

TEST(ScheduleMemoryTest, RowsAreKeptForTheComponentsTensorsOnly) {
  ScheduleMemory memory;
  const std::vector<TensorEntry> tensors = {Named("a.weight"), Named("b.weight")};
  memory.RememberRows({1000, "flux", ""}, tensors,
                      {{"a.weight", 1}, {"b.weight", 4096}, {"not.in.component", 7}});
  EXPECT_THAT(memory.LearnedRows({1000, "flux", ""}),
              UnorderedElementsAre(Pair("a.weight", 1u), Pair("b.weight", 4096u)));
  EXPECT_THAT(memory.LearnedRows({1001, "flux", ""}), IsEmpty());
  // A derived version without rows of its own uses its base's.
  EXPECT_THAT(memory.LearnedRows({1000, "flux+lora", "flux"}), testing::SizeIs(2));
  // Rows that name nothing of the component replace nothing.
  memory.RememberRows({1000, "flux", ""}, tensors, {{"other", 3}});
  EXPECT_THAT(memory.LearnedRows({1000, "flux", ""}), testing::SizeIs(2));
}

}  // namespace
}  // namespace ddo
