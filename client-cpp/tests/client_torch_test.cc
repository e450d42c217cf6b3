// ddo::Client, ddo::Attached and ddo::stream against a real ddod on the host backend (device
// "cpu": shared memory and memcpy, the same protocol as a GPU), or on DDO_TEST_DEVICE (the GPU
// machine: "cuda:0"). Streamed outputs must be bitwise equal to the unstreamed module's on the
// same device.
#include <signal.h>

#include <chrono>
#include <cstdlib>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "client-cpp/examples/transformer_model.h"
#include "client-cpp/tests/test_daemon.h"
#include "ddo/client.h"
#include "ddo/streaming.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ddo {
namespace {

using ::testing::HasSubstr;
using ddo_example::InitWeights;
using ddo_example::Transformer;
using ddo_example::TransformerConfig;

constexpr char kKey[] = "cpp-transformer";

TransformerConfig SmallConfig() {
  TransformerConfig config;
  config.dim = 64;
  config.heads = 4;
  config.mlp_ratio = 2;
  config.blocks = 3;
  config.input_dim = 16;
  return config;
}

// The device the streamed tests run on: DDO_TEST_DEVICE, "cpu" unless set (the GPU machine runs
// them on "cuda:0", against the model with all its weights on that device).
torch::Device TestDevice() {
  const char* configured = std::getenv("DDO_TEST_DEVICE");
  return torch::Device(configured != nullptr && *configured != '\0' ? configured : "cpu");
}

Transformer MakeModel(uint64_t seed = 7, torch::Dtype dtype = torch::kFloat32) {
  Transformer model(SmallConfig());
  InitWeights(*model, seed);
  model->to(dtype);
  model->eval();
  for (auto& parameter : model->parameters()) parameter.set_requires_grad(false);
  return model;
}

torch::Tensor Input(int64_t step, torch::Dtype dtype = torch::kFloat32,
                    torch::Device device = TestDevice()) {
  torch::manual_seed(1000 + step);
  return torch::randn({2, 5, SmallConfig().input_dim}).to(dtype).to(device);
}

// The model's outputs for `steps`, each forward marked as one cycle.
std::vector<torch::Tensor> Forwards(Transformer& model, StreamingSession* session,
                               const std::vector<int64_t>& steps,
                               torch::Dtype dtype = torch::kFloat32,
                               torch::Device device = TestDevice()) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> outputs;
  for (int64_t step : steps) {
    std::optional<ForwardScope> pass;
    if (session != nullptr) pass.emplace(*session);
    outputs.push_back(model->forward(Input(step, dtype, device)));
  }
  return outputs;
}

// The outputs of MakeModel(7, dtype) with all its weights on `device`.
std::vector<torch::Tensor> Reference(const std::vector<int64_t>& steps,
                                     torch::Dtype dtype = torch::kFloat32,
                                     torch::Device device = TestDevice()) {
  Transformer model = MakeModel(7, dtype);
  model->to(device);
  return Forwards(model, nullptr, steps, dtype, device);
}

void ExpectBitwiseEqual(const std::vector<torch::Tensor>& got,
                        const std::vector<torch::Tensor>& expected) {
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_TRUE(torch::equal(got[i], expected[i]))
        << "step " << i << ": largest difference "
        << (got[i].to(torch::kFloat64) - expected[i].to(torch::kFloat64))
               .abs().max().item<double>();
  }
}

StreamSettings Settings(const std::string& unit, int slots) {
  StreamSettings settings;
  settings.settings = {{"DDO_SMALL_TENSOR_THRESHOLD_KB", "0"},
                       {"DDO_STREAM_UNIT", unit},
                       {"DDO_RING_SLOTS", std::to_string(slots)}};
  return settings;
}

class ClientTorchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    daemon_ = std::make_unique<test_support::Ddod>(dir_);
    ConnectOptions options;
    options.address = daemon_->address();
    options.allow_embedded = false;
    client_ = std::make_unique<Client>(Client::Connect(options));
  }
  void TearDown() override {
    client_.reset();
    daemon_.reset();
  }

  test_support::TempDir dir_;
  std::unique_ptr<test_support::Ddod> daemon_;
  std::unique_ptr<Client> client_;
};

TEST_F(ClientTorchTest, AttachedTensorsAreBitwiseEqualAndBindIntoAModule) {
  Transformer model = MakeModel();
  RegisterResult stored = client_->register_module(kKey, *model);
  EXPECT_FALSE(stored.warm_hit);
  EXPECT_GT(stored.uploaded_bytes, 0u);
  EXPECT_TRUE(client_->register_module(kKey, *model).warm_hit);

  Attached attached = client_->attach(kKey);
  std::map<std::string, torch::Tensor> expected;
  for (const auto& item : model->named_parameters()) expected[item.key()] = item.value();
  ASSERT_EQ(attached.tensors().size(), expected.size());
  for (const auto& [name, tensor] : attached.tensors()) {
    EXPECT_TRUE(torch::equal(tensor, expected.at(name))) << name;
  }

  Transformer other = MakeModel(/*seed=*/99);
  const torch::Device host("cpu");  // attached tensors are host views
  const std::vector<torch::Tensor> reference =
      Forwards(model, nullptr, {0, 1}, torch::kFloat32, host);
  BindResult result = attached.bind(*other);
  EXPECT_TRUE(result.missing_keys.empty() && result.unexpected_keys.empty());
  ExpectBitwiseEqual(Forwards(other, nullptr, {0, 1}, torch::kFloat32, host), reference);

  // A write stays in this process (copy-on-write).
  attached.tensors().at("head.weight").fill_(3);
  Attached again = client_->attach(kKey);
  EXPECT_TRUE(torch::equal(again.tensors().at("head.weight"), expected.at("head.weight")));
}

TEST_F(ClientTorchTest, BindRefusesAModuleOfAnotherShapeNamingTheTensors) {
  Transformer model = MakeModel();
  client_->register_module(kKey, *model);
  Attached attached = client_->attach(kKey);
  TransformerConfig wider = SmallConfig();
  wider.dim = 32;
  Transformer other(wider);
  try {
    attached.bind(*other);
    FAIL() << "bind accepted a module of another shape";
  } catch (const BindError& error) {
    EXPECT_THAT(error.what(), HasSubstr("another shape or dtype"));
    EXPECT_THAT(error.what(), HasSubstr("blocks.0.attn.q.weight: component Float [64, 64], "
                                        "module Float [32, 32]"));
  }
}

class StreamedForwardTest
    : public ClientTorchTest,
      public ::testing::WithParamInterface<std::tuple<std::string, int, torch::Dtype>> {};

TEST_P(StreamedForwardTest, IsBitwiseEqualToTheUnstreamedModuleOverManyCycles) {
  const auto& [unit, slots, dtype] = GetParam();
  Transformer model = MakeModel(7, dtype);
  const std::vector<int64_t> steps = {0, 1, 2, 3, 4, 5, 6, 7};
  const std::vector<torch::Tensor> reference = Reference(steps, dtype);
  client_->register_module(kKey, *model);

  Transformer streamed = MakeModel(/*seed=*/99, dtype);  // other weights: the session's count
  auto session = stream(*client_, *streamed, kKey, TestDevice(), Settings(unit, slots));
  const StreamStats opened = session->stats();
  const uint32_t units = unit == "linear" ? 3 * 6 + 1 : 3 + 1;  // blocks, and the head
  EXPECT_EQ(opened.units, units) << session->plan();
  EXPECT_GE(opened.ring_slots, static_cast<uint32_t>(slots));
  EXPECT_TRUE(session->schedule().empty());

  ExpectBitwiseEqual(Forwards(streamed, session.get(), steps, dtype), reference);
  const StreamStats stats = session->stats();
  EXPECT_EQ(session->schedule().size(), units);
  EXPECT_EQ(stats.sync_uses, units);  // the learning forward
  EXPECT_EQ(stats.streamed_uses, (steps.size() - 1) * units);
  EXPECT_EQ(stats.skipped_uses, 0u);
  EXPECT_GT(stats.overhead_us_per_unit, 0.0);

  session->close();
  EXPECT_TRUE(session->closed());
  // Closed: the module runs on the host pool's copy-on-write views, with the host's results.
  const torch::Device host("cpu");
  ExpectBitwiseEqual(Forwards(streamed, nullptr, {0, 1}, dtype, host),
                     Reference({0, 1}, dtype, host));
}

INSTANTIATE_TEST_SUITE_P(
    UnitsSlotsAndDtypes, StreamedForwardTest,
    ::testing::Values(std::make_tuple("linear", 2, torch::kFloat32),
                      std::make_tuple("linear", 8, torch::kFloat32),
                      std::make_tuple("block", 2, torch::kFloat32),
                      std::make_tuple("block", 3, torch::kBFloat16)));

TEST_F(ClientTorchTest, AUseOutsideTheScheduleIsServedFromTheExtraSlot) {
  Transformer model = MakeModel();
  const std::vector<torch::Tensor> reference = Reference({0, 1, 2});
  auto head = model->named_modules()["head"]->as<nn::LinearImpl>();
  torch::Tensor features = torch::randn({3, SmallConfig().dim}).to(TestDevice());
  torch::Tensor head_reference;
  {
    torch::NoGradGuard no_grad;
    Transformer on_device = MakeModel();
    on_device->to(TestDevice());
    head_reference = on_device->named_modules()["head"]->as<nn::LinearImpl>()->forward(features);
  }
  client_->register_module(kKey, *model);
  // One unit per Linear: the head's is last in the cycle, beyond the K-1 uses a consumer
  // looks ahead.
  auto session = stream(*client_, *model, kKey, TestDevice(), Settings("linear", 2));
  ExpectBitwiseEqual(Forwards(model, session.get(), {0}), {reference[0]});
  const StreamStats learned = session->stats();
  ASSERT_LT(learned.ring_slots, learned.units - 1);
  {
    // A branch: only the head runs, so ddod serves it out of schedule.
    torch::NoGradGuard no_grad;
    ForwardScope pass(*session);
    EXPECT_TRUE(torch::equal(head->forward(features), head_reference));
  }
  EXPECT_EQ(session->stats().sync_uses, learned.sync_uses + 1);
  ExpectBitwiseEqual(Forwards(model, session.get(), {1, 2}), {reference[1], reference[2]});
  const StreamStats after = session->stats();
  EXPECT_EQ(after.skipped_uses, learned.skipped_uses);
  EXPECT_EQ(after.streamed_uses, learned.streamed_uses + 2 * learned.units);
}

TEST_F(ClientTorchTest, ASecondSessionReceivesTheScheduleAndStreamsFromItsFirstForward) {
  Transformer model = MakeModel();
  const std::vector<torch::Tensor> reference = Reference({0, 1});
  client_->register_module(kKey, *model);
  std::vector<uint32_t> learned;
  {
    auto first = stream(*client_, *model, kKey, TestDevice(), Settings("linear", 2));
    Forwards(model, first.get(), {0});
    learned = first->schedule();
  }
  auto second = stream(*client_, *model, kKey, TestDevice(), Settings("linear", 2));
  EXPECT_EQ(second->schedule(), learned);
  ExpectBitwiseEqual(Forwards(model, second.get(), {0, 1}), reference);
  EXPECT_EQ(second->stats().sync_uses, 0u);
}

TEST_F(ClientTorchTest, StrictRefusesPlainTorchLinearsAndNamesThem) {
  Transformer model = MakeModel();
  client_->register_module(kKey, *model);
  StreamSettings settings = Settings("block", 2);
  settings.strict = true;
  try {
    stream(*client_, *model, kKey, TestDevice(), settings);
    FAIL() << "strict accepted a plain torch::nn::Linear";
  } catch (const BindError& error) {
    EXPECT_THAT(error.what(), HasSubstr("'embed'"));
  }
}

TEST_F(ClientTorchTest, ErrorsCarryDdodsCodeAndMessage) {
  Transformer model = MakeModel();
  try {
    stream(*client_, *model, "no-such-key", TestDevice(), Settings("block", 2));
    FAIL();
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), StatusCode::kNotFound);
    EXPECT_THAT(error.what(), HasSubstr("no-such-key"));
  }
  client_->register_module(kKey, *model);
  try {
    stream(*client_, *model, kKey, TestDevice(), Settings("block", 1));
    FAIL();
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(error.what(), HasSubstr("DDO_RING_SLOTS"));
  }
  TransformerConfig wider = SmallConfig();
  wider.dim = 32;
  Transformer other(wider);
  EXPECT_THROW(stream(*client_, *other, kKey, TestDevice(), Settings("block", 2)),
               BindError);
  // Nothing refused stays open in ddod: the component can go.
  EXPECT_GT(client_->evict(kKey), 0u);
}

TEST_F(ClientTorchTest, ASessionDetachedUnderTheRunnerRaisesSessionClosed) {
  Transformer model = MakeModel();
  client_->register_module(kKey, *model);
  auto session = stream(*client_, *model, kKey, TestDevice(), Settings("linear", 2));
  Forwards(model, session.get(), {0});
  ASSERT_TRUE(client_->rpc().detach(session->session_id()).ok());
  EXPECT_THROW(Forwards(model, session.get(), {1}), SessionClosedError);
  session->close();  // must not throw
}

TEST_F(ClientTorchTest, ARunnerWaitingOnAKilledDdodRaisesDaemonGoneWithinTwoSeconds) {
  Transformer model = MakeModel();
  const std::vector<torch::Tensor> reference = Reference({0, 1, 2});
  client_->register_module(kKey, *model);
  auto session = stream(*client_, *model, kKey, TestDevice(), Settings("linear", 2));
  ExpectBitwiseEqual(Forwards(model, session.get(), {0, 1}), {reference[0], reference[1]});
  const pid_t pid = daemon_->pid();
  ::kill(pid, SIGKILL);  // not reaped yet: a zombie, as the Python test has it
  const auto started = std::chrono::steady_clock::now();
  try {
    Forwards(model, session.get(), {2});
    FAIL() << "the forward finished without ddod";
  } catch (const DaemonGoneError& error) {
    EXPECT_THAT(error.what(), HasSubstr("pid " + std::to_string(pid)));
  }
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(2));
  daemon_->Stop(SIGKILL);
  session->close();  // ddod is gone: closing must not throw
  // The module is back on the host pool's views and runs without ddod.
  const torch::Device host("cpu");
  ExpectBitwiseEqual(Forwards(model, nullptr, {2}, torch::kFloat32, host),
                     Reference({2}, torch::kFloat32, host));
}

TEST_F(ClientTorchTest, ABackwardThroughAStreamedWeightRaises) {
  Transformer model = MakeModel();
  client_->register_module(kKey, *model);
  auto session = stream(*client_, *model, kKey, TestDevice(), Settings("block", 2));
  torch::Tensor input = Input(0).set_requires_grad(true);
  torch::Tensor output;
  {
    ForwardScope pass(*session);
    output = model->forward(input);
  }
  try {
    output.sum().backward();
    FAIL() << "backward went through a streamed weight";
  } catch (const std::exception& error) {
    EXPECT_THAT(error.what(), HasSubstr("cannot backpropagate"));
  }
}

}  // namespace
}  // namespace ddo
