// File: client-cpp/tests/consumer_scenarios_test.cc
//
// The scenario table shared with the Python consumer (consumer_scenarios.json; the Python
// side is tests/python/test_consumer_scenarios.py): the same runner steps against the same
// fake ddod must give the same counters, learned orders and errors in both consumers
// (docs/plans/issue-18-client-cpp.md, risk R6).
#include <gtest/gtest.h>

#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "client-cpp/src/consumer/ring_consumer.h"
#include "client-cpp/tests/fake_ddod.h"
#include "ddo/status.h"

namespace ddo::consumer {
namespace {

using nlohmann::json;

constexpr uint64_t kArena = 1 << 20;

json LoadScenarios() {
  std::ifstream file(DDO_CONSUMER_SCENARIOS);
  return json::parse(file);
}

// What a scenario observed, in the table's terms.
struct Outcome {
  json observed = json::object();
  std::optional<std::string> error_type;
  std::string error_message;
  std::string error_at;
};

// Runs `body`, recording a consumer error (most derived class first) into `outcome`.
template <typename Body>
bool Guarded(Outcome& outcome, const std::string& at, Body body) {
  try {
    body();
    return true;
  } catch (const DaemonGoneError& error) {
    outcome.error_type = "DaemonGoneError";
    outcome.error_message = error.what();
  } catch (const SessionClosedError& error) {
    outcome.error_type = "SessionClosedError";
    outcome.error_message = error.what();
  } catch (const StreamingError& error) {
    outcome.error_type = "StreamingError";
    outcome.error_message = error.what();
  }
  outcome.error_at = at;
  return false;
}

Outcome RunScenario(const json& scenario) {
  const uint32_t slots = scenario["slots"];
  const std::vector<uint64_t> spans = scenario["spans"];
  const std::vector<uint32_t> schedule = scenario["schedule"];
  const json daemon = scenario.value("daemon", json::object());
  FakeDdod ddod(slots, static_cast<uint32_t>(spans.size()), kArena);
  if (!schedule.empty()) ddod.SetSchedule(schedule);
  ddod.Pause(daemon.value("paused", false));
  ddod.PublishWrongSlotUse(daemon.value("wrong_slot_use", false));
  const std::string state = daemon.value("state", "open");
  if (state == "closed") ddod.SetState(SessionState::kClosed);
  if (state == "failed") ddod.SetState(SessionState::kFailed);
  ddod.Start();

  RingConsumerOptions options;
  options.control = ddod.control().base;
  options.control_bytes = ddod.control_bytes();
  options.doorbell = ddod.doorbell().base;
  options.doorbell_bytes = ddod.doorbell_bytes();
  options.slots = slots;
  options.units = static_cast<uint32_t>(spans.size());
  options.arena_bytes = kArena;
  options.unit_spans = spans;
  options.schedule = schedule;
  options.stall_timeout_ns = static_cast<int64_t>(scenario.value("stall_timeout_s", 120.0) * 1e9);

  Outcome outcome;
  std::unique_ptr<RingConsumer> consumer;
  if (!Guarded(outcome, "open", [&] { consumer = std::make_unique<RingConsumer>(options); })) {
    return outcome;
  }
  json learned = json::array();
  for (const json& step : scenario["steps"]) {
    const bool ok = Guarded(outcome, "step", [&] {
      if (step.is_number()) {
        consumer->Acquire(step.get<uint32_t>());
      } else if (step == "begin") {
        consumer->BeginForward();
      } else if (step == "end") {
        std::vector<uint32_t> order = consumer->EndForward();
        if (!order.empty()) {
          learned.push_back(order);
          ddod.SetSchedule(order);  // SetSchedule: ddod accepts all of it
          consumer->AdoptSchedule(order, order.size());
        }
      } else if (step == "release") {
        consumer->Release();
      } else {
        FAIL() << "unknown step " << step;
      }
    });
    if (!ok) break;
  }
  ddod.Stop();
  const ConsumerStatistics& stats = consumer->statistics();
  outcome.observed = {
      {"uses", stats.uses},
      {"streamed_uses", stats.streamed_uses},
      {"sync_uses", stats.sync_uses},
      {"skipped_uses", stats.skipped_uses},
      {"bytes_used", stats.bytes_used},
      {"consumed", ddod.control().consumed().load()},
      {"sync_units", ddod.sync_units()},
      {"learned", learned},
  };
  return outcome;
}

class ConsumerScenario : public ::testing::TestWithParam<std::string> {};

TEST_P(ConsumerScenario, MatchesTheTable) {
  const json scenarios = LoadScenarios()["scenarios"];
  for (const json& scenario : scenarios) {
    if (scenario["name"] != GetParam()) continue;
    const Outcome outcome = RunScenario(scenario);
    const json& expect = scenario["expect"];
    for (const auto& [key, value] : expect.items()) {
      if (key == "error") continue;
      EXPECT_EQ(outcome.observed.value(key, json()), value) << key;
    }
    if (expect.contains("error")) {
      const json& error = expect["error"];
      EXPECT_EQ(outcome.error_type.value_or("none"), error["type"].get<std::string>());
      EXPECT_EQ(outcome.error_message, error["message"].get<std::string>());
      EXPECT_EQ(outcome.error_at, error.value("at", "step"));
    } else {
      EXPECT_FALSE(outcome.error_type.has_value()) << outcome.error_message;
    }
    return;
  }
  FAIL() << "no scenario " << GetParam();
}

std::vector<std::string> ScenarioNames() {
  std::vector<std::string> names;
  const json table = LoadScenarios();
  for (const json& scenario : table["scenarios"]) names.push_back(scenario["name"]);
  return names;
}

INSTANTIATE_TEST_SUITE_P(Table, ConsumerScenario, ::testing::ValuesIn(ScenarioNames()),
                         [](const ::testing::TestParamInfo<std::string>& param) {
                           return param.param;
                         });

}  // namespace
}  // namespace ddo::consumer
