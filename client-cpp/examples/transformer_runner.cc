// File: client-cpp/examples/transformer_runner.cc
//
// A C++ runner streaming a transformer through ddod:
//
//   transformer_runner [--device cpu|cuda:0] [--dim 768] [--heads 12] [--blocks 4] [--steps 5]
//                      [--tokens 64] [--unit block|linear] [--slots K] [--dtype float32|bfloat16]
//                      [--key NAME] [--setting DDO_NAME=VALUE]... [--check]
//
// It connects (DDO_DAEMON, the default sockets, or a private ddod), stores the model's weights
// in ddod unless ddod has them already (a warm hit: a second runner starts at once), streams
// them into the model on the device, runs the steps and prints a checksum of each output, the
// step times and the session's counters. --check also runs the same model with all its weights
// on the device and compares the outputs bitwise.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "client-cpp/examples/transformer_model.h"
#include "ddo/client.h"
#include "ddo/streaming.h"

namespace {

struct Options {
  std::string device = "cpu";
  std::string unit = "block";
  std::string key = "example-transformer";
  std::string dtype = "float32";
  int slots = 0;  // 0: ddod's default
  int steps = 5;
  int tokens = 64;  // per forward, batch 1
  bool check = false;
  std::map<std::string, std::string> settings;  // --setting: per-session DDO_* values
  ddo_example::TransformerConfig model;
};

// Prints the usage (after `problem`, if any) and exits: 0 for --help, 2 for a bad argument.
[[noreturn]] void Usage(const char* problem, int code = 2) {
  std::fprintf(code == 0 ? stdout : stderr,
               "%s\nusage: transformer_runner [--device cpu|cuda:N] [--dim D] [--heads H] "
               "[--blocks N] "
               "[--steps N] [--tokens N] [--unit block|linear] [--slots K] [--dtype float32|bfloat16] "
               "[--key NAME] [--setting DDO_NAME=VALUE]... [--check]\n",
               problem);
  std::exit(code);
}

Options Parse(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) Usage(("missing value after " + flag).c_str());
      return argv[++i];
    };
    auto number = [&]() -> int64_t {
      const std::string text = value();
      char* end = nullptr;
      const long long parsed = std::strtoll(text.c_str(), &end, 10);
      if (end == text.c_str() || *end != '\0' || parsed <= 0) {
        Usage((flag + " takes a positive integer, not '" + text + "'").c_str());
      }
      return parsed;
    };
    if (flag == "--device") options.device = value();
    else if (flag == "--unit") options.unit = value();
    else if (flag == "--key") options.key = value();
    else if (flag == "--dtype") options.dtype = value();
    else if (flag == "--slots") options.slots = static_cast<int>(number());
    else if (flag == "--steps") options.steps = static_cast<int>(number());
    else if (flag == "--tokens") options.tokens = static_cast<int>(number());
    else if (flag == "--dim") options.model.dim = number();
    else if (flag == "--blocks") options.model.blocks = number();
    else if (flag == "--heads") options.model.heads = number();
    else if (flag == "--check") options.check = true;
    else if (flag == "--setting") {
      const std::string setting = value();
      const size_t equals = setting.find('=');
      if (equals == std::string::npos || setting.rfind("DDO_", 0) != 0) {
        Usage(("--setting takes DDO_NAME=VALUE, not '" + setting + "'").c_str());
      }
      options.settings[setting.substr(0, equals)] = setting.substr(equals + 1);
    }
    else if (flag == "--help" || flag == "-h") {
      Usage("a C++ runner streaming a transformer through ddod (docs/client-cpp.md)", 0);
    }
    else Usage(("unknown option " + flag).c_str());
  }
  if (options.model.dim % options.model.heads != 0) {
    Usage("--dim must be a multiple of --heads");
  }
  if (options.dtype != "float32" && options.dtype != "bfloat16") {
    Usage("--dtype is float32 or bfloat16");
  }
  return options;
}

double Seconds(std::chrono::steady_clock::duration elapsed) {
  return std::chrono::duration<double>(elapsed).count();
}

void Synchronize(const torch::Device& device) {
  if (device.is_cuda()) {
    c10::impl::getDeviceGuardImpl(c10::kCUDA)->getStream(device).synchronize();
  }
}

}  // namespace

int main(int argc, char** argv) {
  const Options options = Parse(argc, argv);
  const torch::Device device(options.device);
  const torch::Dtype dtype = options.dtype == "bfloat16" ? torch::kBFloat16 : torch::kFloat32;
  try {
    ddo_example::Transformer model(options.model);
    ddo_example::InitWeights(*model, /*seed=*/1);
    model->to(dtype);
    model->eval();

    ddo::Client client = ddo::Client::Connect();
    const auto stored_at = std::chrono::steady_clock::now();
    ddo::RegisterResult stored = client.register_module(options.key, *model);
    std::printf("component %s: %s (%.2f s, %.1f MiB)\n", options.key.c_str(),
                stored.warm_hit ? "warm hit" : "uploaded",
                Seconds(std::chrono::steady_clock::now() - stored_at),
                stored.component.total_bytes / 1048576.0);

    std::vector<torch::Tensor> inputs;
    torch::manual_seed(2);
    for (int step = 0; step < options.steps; ++step) {
      inputs.push_back(
          torch::randn({1, options.tokens, options.model.input_dim}).to(dtype).to(device));
    }

    ddo::StreamSettings settings;
    settings.settings = options.settings;
    settings.settings["DDO_STREAM_UNIT"] = options.unit;
    if (options.slots > 0) settings.settings["DDO_RING_SLOTS"] = std::to_string(options.slots);
    auto session = ddo::stream(client, *model, options.key, device, settings);
    std::printf("%s\n", session->plan().c_str());

    torch::NoGradGuard no_grad;
    std::vector<torch::Tensor> outputs;
    for (int step = 0; step < options.steps; ++step) {
      const auto started = std::chrono::steady_clock::now();
      {
        ddo::ForwardScope pass(*session);
        outputs.push_back(model->forward(inputs[step]));
      }
      Synchronize(device);
      std::printf("step %d: %.4f s, checksum %.6f\n", step,
                  Seconds(std::chrono::steady_clock::now() - started),
                  outputs.back().to(torch::kFloat64).sum().item<double>());
    }
    const ddo::StreamStats stats = session->stats();
    std::printf("units %u, ring slots %u, uses %llu (%llu streamed, %llu out of schedule), "
                "waited %.3f s, overhead %.2f us/unit\n",
                stats.units, stats.ring_slots, static_cast<unsigned long long>(stats.uses),
                static_cast<unsigned long long>(stats.streamed_uses),
                static_cast<unsigned long long>(stats.sync_uses), stats.wait_seconds,
                stats.overhead_us_per_unit);
    session->close();

    if (options.check) {
      model->to(device);  // the host pool's copy-on-write views, copied to the device
      int equal = 0;
      for (int step = 0; step < options.steps; ++step) {
        equal += torch::equal(model->forward(inputs[step]), outputs[step]) ? 1 : 0;
      }
      std::printf("check: %d of %d outputs bitwise equal to the all-on-device model\n", equal,
                  options.steps);
      if (equal != options.steps) return 1;
    }
    return 0;
  } catch (const ddo::Error& error) {
    std::fprintf(stderr, "transformer_runner: %s: %s\n", ddo::StatusCodeName(error.code()),
                 error.what());
    return 1;
  } catch (const std::exception& error) {  // torch's own errors
    std::fprintf(stderr, "transformer_runner: %s\n", error.what());
    return 1;
  }
}
