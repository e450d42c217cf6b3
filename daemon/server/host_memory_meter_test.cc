#include "daemon/server/host_memory_meter.h"

#include <map>
#include <vector>

#include "daemon/common/random_id.h"
#include "gtest/gtest.h"

namespace ddo {
namespace {

constexpr uint64_t kMiB = 1 << 20;

// Processes as the meter reads them, set by each test.
struct FakeSystem {
  ProcessFootprint own{10 * kMiB, /*started=*/100};
  std::map<int64_t, ProcessFootprint> processes;
  std::vector<int64_t> leases;
  std::map<int64_t, uint64_t> uploading;

  MeterSources Sources() {
    MeterSources sources;
    sources.runner_pids = [this] { return leases; };
    sources.uploading_bytes = [this] { return uploading; };
    sources.read_process = [this](int64_t pid) -> absl::StatusOr<ProcessFootprint> {
      auto it = processes.find(pid);
      if (it == processes.end()) return absl::NotFoundError("gone");
      return it->second;
    };
    sources.read_own = [this]() -> absl::StatusOr<ProcessFootprint> { return own; };
    return sources;
  }
};

PoolOptions Pool(uint64_t budget) {
  PoolOptions options;
  options.budget_bytes = budget;
  options.name_namespace = PoolNamespace("/tmp/meter-test-" + RandomId());
  return options;
}

TEST(HostMemoryMeterTest, CountsDdodAndEachRunnerOnce) {
  HostPool pool(Pool(1024 * kMiB));
  FakeSystem system;
  system.processes[7] = {300 * kMiB, 200};
  system.processes[8] = {50 * kMiB, 300};
  system.leases = {7, 8, 7};  // two leases of process 7
  HostMemoryMeter meter(pool, system.Sources(), MeterOptions{});
  EXPECT_EQ(meter.MeasureOnce(), 360 * kMiB);
  EXPECT_EQ(pool.Usage().outside_bytes, 360 * kMiB);
  EXPECT_EQ(pool.Usage().room_bytes(), 664 * kMiB);
  system.leases = {8};  // process 7 closed its leases
  EXPECT_EQ(meter.MeasureOnce(), 60 * kMiB);
}

TEST(HostMemoryMeterTest, DdodsHoldsAreNotCountedTwice) {
  HostPool pool(Pool(1024 * kMiB));
  ASSERT_TRUE(pool.TryHold(8 * kMiB));  // staging buffers: anonymous memory of ddod's
  FakeSystem system;
  HostMemoryMeter meter(pool, system.Sources(), MeterOptions{});
  EXPECT_EQ(meter.MeasureOnce(), 2 * kMiB);
  pool.ReleaseHold(8 * kMiB);
}

TEST(HostMemoryMeterTest, WhatARunnerIsUploadingIsNotCountedTwice) {
  HostPool pool(Pool(1024 * kMiB));
  FakeSystem system;
  system.processes[7] = {700 * kMiB, 200};
  system.leases = {7};
  system.uploading[7] = 600 * kMiB;
  HostMemoryMeter meter(pool, system.Sources(), MeterOptions{});
  EXPECT_EQ(meter.MeasureOnce(), 110 * kMiB);
  system.uploading[7] = 900 * kMiB;  // more than it holds: nothing, never less
  EXPECT_EQ(meter.MeasureOnce(), 10 * kMiB);
}

TEST(HostMemoryMeterTest, ADerivedBudgetCountsAnOlderRunnerOnlyForItsGrowth) {
  HostPool pool(Pool(1024 * kMiB));
  FakeSystem system;
  system.processes[5] = {400 * kMiB, /*started=*/50};   // started before ddod (100)
  system.processes[9] = {100 * kMiB, /*started=*/150};  // after
  system.leases = {5, 9};
  MeterOptions options;
  options.derived_budget = true;
  HostMemoryMeter meter(pool, system.Sources(), options);
  EXPECT_EQ(meter.MeasureOnce(), 110 * kMiB) << "the older one was in 'available' already";
  system.processes[5].private_bytes = 450 * kMiB;
  EXPECT_EQ(meter.MeasureOnce(), 160 * kMiB);
  system.processes[5].private_bytes = 100 * kMiB;
  EXPECT_EQ(meter.MeasureOnce(), 110 * kMiB) << "shrinking below its baseline counts nothing";
  // An explicit budget counts everything.
  HostMemoryMeter explicit_meter(pool, system.Sources(), MeterOptions{});
  EXPECT_EQ(explicit_meter.MeasureOnce(), 210 * kMiB);
}

TEST(HostMemoryMeterTest, AProcessItCannotReadCountsNothing) {
  HostPool pool(Pool(1024 * kMiB));
  FakeSystem system;
  system.leases = {42};  // no such process
  HostMemoryMeter meter(pool, system.Sources(), MeterOptions{});
  EXPECT_EQ(meter.MeasureOnce(), 10 * kMiB);
}

TEST(HostMemoryMeterTest, RunsUntilStopped) {
  HostPool pool(Pool(1024 * kMiB));
  FakeSystem system;
  MeterOptions options;
  options.period = absl::Milliseconds(5);
  HostMemoryMeter meter(pool, system.Sources(), options);
  meter.Start();
  for (int i = 0; i < 400 && pool.Usage().outside_bytes == 0; ++i) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_EQ(pool.Usage().outside_bytes, 10 * kMiB);
  meter.Stop();
}

}  // namespace
}  // namespace ddo
