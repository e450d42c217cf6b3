// File: client-cpp/tests/ring_consumer_test.cc
//
// The ring consumer against a fake ddod (fake_ddod.h): real shared mappings, a real thread on
// ddod's side, real futexes. Each case checks what py/ring_consumer.py does in the same
// situation: the counters, the words published to ddod, and the error texts.
#include "client-cpp/src/consumer/ring_consumer.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "client-cpp/tests/fake_ddod.h"
#include "ddo/status.h"

namespace ddo::consumer {
namespace {

using std::chrono::milliseconds;

constexpr uint64_t kArena = 1 << 20;

RingConsumerOptions OptionsFor(const FakeDdod& ddod, std::vector<uint64_t> spans,
                               std::vector<uint32_t> schedule = {}) {
  RingConsumerOptions options;
  options.control = ddod.control().base;
  options.control_bytes = ddod.control_bytes();
  options.control_name = "/ddo-test-control";
  options.doorbell = ddod.doorbell().base;
  options.doorbell_bytes = ddod.doorbell_bytes();
  options.doorbell_name = "/ddo-test-doorbell";
  options.slots = ddod.control().slots;
  options.units = static_cast<uint32_t>(spans.size());
  options.arena_bytes = ddod.arena_bytes();
  options.unit_spans = std::move(spans);
  options.schedule = std::move(schedule);
  return options;
}

// Runs `body`, which must throw E; returns its message.
template <typename E, typename Body>
std::string MessageOf(Body body) {
  try {
    body();
  } catch (const E& error) {
    return error.what();
  }
  ADD_FAILURE() << "no exception";
  return "";
}

TEST(RingConsumer, InScheduleUsesAreServedWhereDdodPlacedThem) {
  FakeDdod ddod(/*slots=*/2, /*units=*/4, kArena);
  const std::vector<uint32_t> schedule = {0, 1, 2, 3};
  ddod.SetSchedule(schedule);
  ddod.Start();
  RingConsumer consumer(OptionsFor(ddod, {256, 512, 768, 1024}, schedule));
  EXPECT_FALSE(consumer.learning());
  for (uint64_t forward = 0; forward < 3; ++forward) {
    consumer.BeginForward();
    for (uint32_t unit : schedule) {
      const uint64_t use = forward * schedule.size() + unit;
      EXPECT_EQ(consumer.Acquire(unit), ddod.PlaceOf(use)) << "use " << use;
      EXPECT_EQ(consumer.held_unit(), unit);
    }
    EXPECT_TRUE(consumer.EndForward().empty());
    EXPECT_EQ(consumer.held_unit(), -1);
  }
  const ConsumerStatistics& stats = consumer.statistics();
  EXPECT_EQ(stats.uses, 12u);
  EXPECT_EQ(stats.streamed_uses, 12u);
  EXPECT_EQ(stats.sync_uses, 0u);
  EXPECT_EQ(stats.skipped_uses, 0u);
  EXPECT_EQ(stats.bytes_used, 3u * (256 + 512 + 768 + 1024));
  EXPECT_GE(stats.overhead_ns, 0);
  EXPECT_EQ(ddod.control().consumed().load(), 12u);
  EXPECT_EQ(ddod.control().consumed_uses().load(), 12u);
  EXPECT_LE(ddod.max_ahead(), 2u);  // ddod never ran more than K uses ahead of `consumed`
  EXPECT_TRUE(ddod.sync_units().empty());
}

TEST(RingConsumer, TheHeldUnitAskedAgainCountsNothing) {
  FakeDdod ddod(2, 2, kArena);
  ddod.SetSchedule({0, 1});
  ddod.Start();
  RingConsumer consumer(OptionsFor(ddod, {256, 256}, {0, 1}));
  consumer.BeginForward();
  const uint64_t first = consumer.Acquire(0);
  EXPECT_EQ(consumer.Acquire(0), first);
  EXPECT_EQ(consumer.Acquire(0), first);
  consumer.Release(1);  // not the held unit: nothing happens
  EXPECT_EQ(consumer.held_unit(), 0);
  EXPECT_EQ(ddod.control().consumed().load(), 0u);
  consumer.Acquire(1);
  consumer.Release(1);
  EXPECT_EQ(consumer.held_unit(), -1);
  consumer.EndForward();
  EXPECT_EQ(consumer.statistics().uses, 2u);
  EXPECT_EQ(consumer.statistics().streamed_uses, 2u);
  EXPECT_EQ(ddod.control().consumed().load(), 2u);
}

TEST(RingConsumer, AUnitWithinTheNextKMinusOneUsesIsReachedBySkipping) {
  FakeDdod ddod(4, 6, kArena);
  const std::vector<uint32_t> schedule = {0, 1, 2, 3, 4, 5};
  ddod.SetSchedule(schedule);
  ddod.Start();
  RingConsumer consumer(OptionsFor(ddod, {256, 256, 256, 256, 256, 256}, schedule));
  consumer.BeginForward();
  consumer.Acquire(0);
  consumer.Acquire(1);
  EXPECT_EQ(consumer.Acquire(3), ddod.PlaceOf(3));  // skips use 2
  consumer.Acquire(4);
  consumer.Acquire(5);
  consumer.EndForward();
  const ConsumerStatistics& stats = consumer.statistics();
  EXPECT_EQ(stats.uses, 5u);
  EXPECT_EQ(stats.streamed_uses, 5u);
  EXPECT_EQ(stats.skipped_uses, 1u);
  EXPECT_EQ(stats.sync_uses, 0u);
  EXPECT_EQ(ddod.control().skipped_uses().load(), 1u);
  EXPECT_EQ(ddod.control().consumed().load(), 6u);
  EXPECT_EQ(consumer.next_use(), 6u);
}

TEST(RingConsumer, AUnitBeyondTheLookAheadGoesOutOfScheduleThroughSlotK) {
  FakeDdod ddod(2, 4, kArena);
  const std::vector<uint32_t> schedule = {0, 1, 2, 3};
  ddod.SetSchedule(schedule);
  ddod.Start();
  RingConsumer consumer(OptionsFor(ddod, {256, 512, 768, 1024}, schedule));
  consumer.BeginForward();
  consumer.Acquire(0);
  EXPECT_EQ(consumer.Acquire(3), kArena);  // K=2 looks 1 use ahead: unit 3 is out of schedule
  EXPECT_EQ(consumer.held_unit(), 3);
  EXPECT_EQ(consumer.Acquire(1), ddod.PlaceOf(1));  // the schedule goes on at use 1
  consumer.EndForward();
  const ConsumerStatistics& stats = consumer.statistics();
  EXPECT_EQ(stats.uses, 3u);
  EXPECT_EQ(stats.streamed_uses, 2u);
  EXPECT_EQ(stats.sync_uses, 1u);
  EXPECT_EQ(stats.skipped_uses, 0u);
  EXPECT_EQ(stats.bytes_used, 256u + 1024 + 512);
  EXPECT_EQ(ddod.sync_units(), std::vector<uint32_t>{3});
  EXPECT_EQ(ddod.control().sync_request().load(), 1u);
  EXPECT_EQ(ddod.control().sync_uses().load(), 1u);
  EXPECT_EQ(ddod.control().consumed().load(), 2u);  // an out-of-schedule use publishes nothing
}

TEST(RingConsumer, BeginForwardRealignsToTheNextCycleStart) {
  FakeDdod ddod(2, 4, kArena);
  const std::vector<uint32_t> schedule = {0, 1, 2, 3};
  ddod.SetSchedule(schedule);
  ddod.Start();
  RingConsumer consumer(OptionsFor(ddod, {256, 256, 256, 256}, schedule));
  consumer.BeginForward();
  consumer.Acquire(0);
  consumer.Acquire(1);
  consumer.EndForward();  // a branch: the forward ended mid-cycle
  consumer.BeginForward();
  EXPECT_EQ(consumer.next_use(), 4u);
  EXPECT_EQ(consumer.statistics().skipped_uses, 2u);
  for (uint32_t unit : schedule) EXPECT_EQ(consumer.Acquire(unit), ddod.PlaceOf(4 + unit));
  consumer.EndForward();
  consumer.BeginForward();  // at a cycle start: no skip
  EXPECT_EQ(consumer.statistics().skipped_uses, 2u);
  EXPECT_EQ(consumer.statistics().streamed_uses, 6u);
}

TEST(RingConsumer, TheLearningForwardRecordsTheOrderAndAdoptsIt) {
  FakeDdod ddod(2, 4, kArena);
  ddod.Start();
  RingConsumer consumer(OptionsFor(ddod, {256, 512, 768, 1024}));
  EXPECT_TRUE(consumer.learning());
  consumer.BeginForward();
  for (uint32_t unit : {2u, 2u, 0u, 1u, 1u, 3u}) EXPECT_EQ(consumer.Acquire(unit), kArena);
  const std::vector<uint32_t> order = consumer.EndForward();
  EXPECT_EQ(order, (std::vector<uint32_t>{2, 0, 1, 3}));  // consecutive repeats once
  EXPECT_EQ(ddod.sync_units(), order);
  EXPECT_EQ(consumer.statistics().sync_uses, 4u);
  EXPECT_EQ(consumer.statistics().uses, 4u);
  EXPECT_EQ(consumer.statistics().streamed_uses, 0u);
  EXPECT_EQ(ddod.control().consumed().load(), 0u);

  EXPECT_EQ(MessageOf<StreamingError>([&] { consumer.AdoptSchedule(order, 3); }),
            "ddod accepted a schedule of 3 uses per cycle, but the runner sent 4");
  EXPECT_TRUE(consumer.learning());
  ddod.SetSchedule(order);  // what SetSchedule tells ddod
  consumer.AdoptSchedule(order, 4);
  EXPECT_FALSE(consumer.learning());
  EXPECT_EQ(consumer.schedule(), order);
  consumer.BeginForward();
  for (uint64_t use = 0; use < order.size(); ++use) {
    EXPECT_EQ(consumer.Acquire(order[use]), ddod.PlaceOf(use));
  }
  EXPECT_TRUE(consumer.EndForward().empty());
  EXPECT_EQ(consumer.statistics().streamed_uses, 4u);
  EXPECT_EQ(consumer.statistics().sync_uses, 4u);
}

TEST(RingConsumer, ASecondLearningForwardStartsTheOrderAfresh) {
  FakeDdod ddod(2, 3, kArena);
  ddod.Start();
  RingConsumer consumer(OptionsFor(ddod, {256, 256, 256}));
  consumer.BeginForward();
  consumer.Acquire(1);
  consumer.BeginForward();  // the last forward threw: its order is dropped
  consumer.Acquire(2);
  consumer.Acquire(0);
  EXPECT_EQ(consumer.EndForward(), (std::vector<uint32_t>{2, 0}));
  EXPECT_TRUE(consumer.EndForward().empty());  // sent once
}

TEST(RingConsumer, ScheduleUnitsThatDoNotExistAreNamedTenAtMost) {
  FakeDdod ddod(2, 4, kArena);
  EXPECT_EQ(MessageOf<StreamingError>([&] {
              RingConsumer consumer(OptionsFor(ddod, {256, 256, 256, 256}, {0, 7, 1, 9}));
            }),
            "the schedule names units [7, 9] that do not exist (the session has 4 units)");
  RingConsumer consumer(OptionsFor(ddod, {256, 256, 256, 256}));
  std::vector<uint32_t> many;
  for (uint32_t unit = 4; unit < 20; ++unit) many.push_back(unit);
  EXPECT_EQ(MessageOf<StreamingError>([&] { consumer.SetSchedule(many); }),
            "the schedule names units [4, 5, 6, 7, 8, 9, 10, 11, 12, 13] that do not exist "
            "(the session has 4 units)");
  EXPECT_TRUE(consumer.learning());
}

TEST(RingConsumer, AnUnknownUnitIsRefusedBeforeDdodIsAsked) {
  FakeDdod ddod(2, 4, kArena);
  RingConsumer consumer(OptionsFor(ddod, {256, 256, 256, 256}));
  EXPECT_EQ(MessageOf<StreamingError>([&] { consumer.Acquire(9); }),
            "unit 9 does not exist (the session has 4 units)");
  EXPECT_EQ(ddod.control().sync_request().load(), 0u);
}

TEST(RingConsumer, ASlotHoldingAnotherUseIsRefused) {
  FakeDdod ddod(2, 4, kArena);
  ddod.SetSchedule({0, 1, 2, 3});
  ddod.PublishWrongSlotUse(true);
  ddod.Start();
  RingConsumer consumer(OptionsFor(ddod, {256, 256, 256, 256}, {0, 1, 2, 3}));
  consumer.BeginForward();
  EXPECT_EQ(MessageOf<StreamingError>([&] { consumer.Acquire(0); }),
            "slot 0 of the ring holds use 1000, but use 0 was published: refusing to compute "
            "with the wrong weights");
  EXPECT_EQ(MessageOf<StreamingError>([&] { consumer.Acquire(3); }),
            "slot 2 of the ring holds request 1001, but request 1 was published: refusing to "
            "compute with the wrong weights");
}

// Waits in Acquire while another thread does `act` after `delay`; returns the error's text.
template <typename E>
std::string AcquireFailsAfter(RingConsumer& consumer, milliseconds delay,
                              const std::function<void()>& act) {
  std::thread actor([&] {
    std::this_thread::sleep_for(delay);
    act();
  });
  const std::string message = MessageOf<E>([&] { consumer.Acquire(0); });
  actor.join();
  return message;
}

TEST(RingConsumer, AClosedOrFailedSessionEndsTheWait) {
  FakeDdod ddod(2, 1, kArena);  // nobody serves: the wait lasts until the state changes
  RingConsumer consumer(OptionsFor(ddod, {256}));
  EXPECT_EQ(AcquireFailsAfter<SessionClosedError>(
                consumer, milliseconds(30), [&] { ddod.SetState(SessionState::kClosed); }),
            "ddod closed this streaming session (it was detached, or ddod is stopping)");
  EXPECT_EQ(ddod.control().runner_waiting().load(), 0u);
  ddod.control().state().store(static_cast<uint32_t>(SessionState::kFailed));
  EXPECT_EQ(MessageOf<SessionClosedError>([&] { consumer.Acquire(0); }),
            "ddod marked this streaming session failed (see ddod's log for the reason)");
  ddod.control().state().store(7);
  EXPECT_EQ(MessageOf<SessionClosedError>([&] { consumer.Acquire(0); }),
            "the session's control block has an unknown state 7");
}

TEST(RingConsumer, ADeadDdodEndsTheWaitWithinAFewChecks) {
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::pause();
    ::_exit(0);
  }
  FakeDdod ddod(2, 1, kArena);
  RingConsumerOptions options = OptionsFor(ddod, {256});
  options.daemon_pid = child;  // alive now, so it is watched
  RingConsumer consumer(std::move(options));
  const auto started = std::chrono::steady_clock::now();
  const std::string message =
      AcquireFailsAfter<DaemonGoneError>(consumer, milliseconds(30), [&] {
        ::kill(child, SIGKILL);
        int status = 0;
        ::waitpid(child, &status, 0);  // reaped: /proc/<pid> disappears
      });
  EXPECT_EQ(message, "ddod (pid " + std::to_string(child) +
                         ") is gone: its streaming session ended with it");
  EXPECT_LT(std::chrono::steady_clock::now() - started, milliseconds(2000));
}

TEST(RingConsumer, ADaemonPidDeadAtOpenIsNotWatched) {
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) ::_exit(0);
  int status = 0;
  ::waitpid(child, &status, 0);
  FakeDdod ddod(2, 1, kArena);
  RingConsumerOptions options = OptionsFor(ddod, {256});
  options.daemon_pid = child;  // as a ddod in another pid namespace: only the stall ends it
  options.stall_timeout_ns = 250'000'000;
  RingConsumer consumer(std::move(options));
  EXPECT_EQ(MessageOf<StreamingError>([&] { consumer.Acquire(0); }),
            "ddod made no progress for 0.25 s: sync_done is 0, the runner waits for 1");
}

TEST(RingConsumer, NoProgressForTheStallTimeoutEndsTheWait) {
  FakeDdod ddod(2, 2, kArena);
  ddod.SetSchedule({0, 1});
  ddod.Pause(true);
  ddod.Start();
  RingConsumerOptions options = OptionsFor(ddod, {256, 256}, {0, 1});
  options.stall_timeout_ns = 200'000'000;
  RingConsumer consumer(std::move(options));
  const auto started = std::chrono::steady_clock::now();
  EXPECT_EQ(MessageOf<StreamingError>([&] { consumer.Acquire(0); }),
            "ddod made no progress for 0.2 s: ready is 0, the runner waits for 1");
  EXPECT_GE(std::chrono::steady_clock::now() - started, milliseconds(200));
  EXPECT_EQ(ddod.control().runner_waiting().load(), 0u);
}

TEST(RingConsumer, AWaitSleepsUntilDdodPublishesAndCountsTheWait) {
  FakeDdod ddod(2, 2, kArena);
  ddod.SetSchedule({0, 1});
  ddod.Pause(true);
  ddod.Start();
  RingConsumerOptions options = OptionsFor(ddod, {256, 256}, {0, 1});
  int before = 0;
  int after = 0;
  options.before_sleep = [&] { EXPECT_EQ(++before, after + 1); };
  options.after_sleep = [&] { EXPECT_EQ(++after, before); };
  RingConsumer consumer(std::move(options));
  std::thread resume([&] {
    std::this_thread::sleep_for(milliseconds(50));
    ddod.Pause(false);
  });
  EXPECT_EQ(consumer.Acquire(0), ddod.PlaceOf(0));
  resume.join();
  EXPECT_GE(consumer.statistics().wait_ns, 40'000'000);
  EXPECT_EQ(ddod.control().runner_waiting().load(), 0u);
  EXPECT_GE(before, 10);  // slices of at most 2 ms, each inside the hooks
  EXPECT_EQ(after, before);
}

// The runner rings the doorbell after publishing `consumed` only while ddod sleeps, and always
// after an out-of-schedule request. ddod is played by hand here, so nothing else rings.
TEST(RingConsumer, TheDoorbellRingsWhenDdodSleepsAndForEveryRequest) {
  FakeDdod ddod(2, 3, kArena);
  const ControlView view = ddod.control();
  const DoorbellView bell = ddod.doorbell();
  RingConsumer consumer(OptionsFor(ddod, {256, 256, 256}, {0, 1}));
  for (uint64_t use = 0; use < 2; ++use) {
    view.slot_offset(static_cast<uint32_t>(use)).store(ddod.PlaceOf(use));
    view.slot_use(static_cast<uint32_t>(use)).store(use);
  }
  view.ready().store(2);

  consumer.Acquire(0);
  bell.daemon_sleeping().store(1);
  uint32_t seq = bell.seq().load();
  consumer.Release();
  EXPECT_EQ(bell.seq().load(), seq + 1);
  EXPECT_EQ(view.consumed().load(), 1u);

  consumer.Acquire(1);
  bell.daemon_sleeping().store(0);
  seq = bell.seq().load();
  consumer.Release();
  EXPECT_EQ(bell.seq().load(), seq);
  EXPECT_EQ(view.consumed().load(), 2u);

  // Out of schedule: the request rings although ddod is awake.
  view.slot_use(2).store(1);
  view.sync_done().store(1);
  seq = bell.seq().load();
  EXPECT_EQ(consumer.Acquire(2), kArena);  // not in the schedule
  EXPECT_EQ(bell.seq().load(), seq + 1);
  EXPECT_EQ(view.sync_unit().load(), 2u);
  EXPECT_EQ(view.sync_request().load(), 1u);
}

TEST(RingConsumer, AReopenedConsumerContinuesWhereTheBlockStands) {
  FakeDdod ddod(2, 2, kArena);
  ddod.control().consumed().store(6);
  ddod.control().sync_request().store(3);
  ddod.Start();
  RingConsumer learner(OptionsFor(ddod, {256, 256}));
  EXPECT_EQ(learner.next_use(), 6u);
  EXPECT_EQ(learner.Acquire(1), kArena);
  EXPECT_EQ(ddod.control().sync_request().load(), 4u);  // the request after the last one
  learner.EndForward();

  ddod.SetSchedule({0, 1});
  RingConsumer follower(OptionsFor(ddod, {256, 256}, {0, 1}));
  EXPECT_EQ(follower.Acquire(1), ddod.PlaceOf(7));  // use 6 is unit 0: skipped
  EXPECT_EQ(follower.statistics().skipped_uses, 1u);
}

TEST(RingConsumer, TheBlockIsCheckedAgainstItsLayoutAndTheAttachAnswer) {
  FakeDdod ddod(2, 2, kArena);
  const ControlView view = ddod.control();
  auto make = [&](RingConsumerOptions options) { RingConsumer consumer(std::move(options)); };

  RingConsumerOptions wrong_answer = OptionsFor(ddod, {256, 256});
  wrong_answer.slots = 3;
  EXPECT_EQ(MessageOf<Error>([&] { make(wrong_answer); }),
            "the control block says K=2, 2 units and a 1048576-byte arena, the Attach answer "
            "K=3, 2 units and 1048576 bytes");

  RingConsumerOptions small = OptionsFor(ddod, {256, 256});
  small.control_bytes = 1040;
  EXPECT_EQ(MessageOf<Error>([&] { make(small); }),
            "the control block /ddo-test-control has 1040 bytes for K=2 slots; it needs 1072");

  view.version().store(1);
  EXPECT_EQ(MessageOf<Error>([&] { make(OptionsFor(ddod, {256, 256})); }),
            "the control block /ddo-test-control has layout version 1; this client reads "
            "version 2 (update the client or ddod)");
  view.magic().store(0);
  EXPECT_EQ(MessageOf<Error>([&] { make(OptionsFor(ddod, {256, 256})); }),
            "the control block /ddo-test-control has magic 0x00000000, not 0x434f4444");
  view.magic().store(control_layout::kMagic);
  view.version().store(control_layout::kVersion);

  ddod.doorbell().magic().store(0x12345678);
  EXPECT_EQ(MessageOf<Error>([&] { make(OptionsFor(ddod, {256, 256})); }),
            "the doorbell /ddo-test-doorbell has magic 0x12345678, not 0x424f4444");
}

}  // namespace
}  // namespace ddo::consumer
