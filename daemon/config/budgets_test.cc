#include "daemon/config/budgets.h"

#include "daemon/config/values.h"
#include "gtest/gtest.h"

namespace ddo {
namespace {

TEST(BudgetsTest, RamBudgetIsAvailableMinusHeadroomUnlessGiven) {
  DaemonOptions options;
  options.system_ram_headroom_gb = 8;
  EXPECT_EQ(RamBudgetBytes(options, GiBToBytes(32)), GiBToBytes(24));
  EXPECT_EQ(RamBudgetBytes(options, GiBToBytes(4)), 0u) << "never below zero";
  options.ram_budget_gb = 10;
  EXPECT_EQ(RamBudgetBytes(options, GiBToBytes(4)), GiBToBytes(10)) << "explicit budget wins";
}

TEST(BudgetsTest, VramBudgetIsCappedAtTheDevice) {
  DaemonOptions options;
  EXPECT_EQ(VramBudgetBytes(options, GiBToBytes(24)), GiBToBytes(24));
  options.vram_budget_gb = 8;
  EXPECT_EQ(VramBudgetBytes(options, GiBToBytes(24)), GiBToBytes(8));
  options.vram_budget_gb = 80;
  EXPECT_EQ(VramBudgetBytes(options, GiBToBytes(24)), GiBToBytes(24));
}

}  // namespace
}  // namespace ddo
