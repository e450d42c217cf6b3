// File: client-cpp/include/ddo/streaming.h
//
// Streaming sessions: a libtorch module runs on a device whose memory ddod owns, and the
// weights of its ddo::nn::Linear layers stream through a ring of slots, one unit at a time, in
// the order the forward uses them (docs/streaming.md, docs/client-cpp.md).
//
//   ddo::Client client = ddo::Client::Connect();
//   auto session = ddo::stream(client, *model, "my-model", torch::Device("cuda:0"));
//   {
//     ddo::ForwardScope pass(*session);  // the forward's boundaries (C++ modules have no hooks)
//     torch::NoGradGuard no_grad;
//     output = model->forward(input);
//   }
//   session->close();  // the module's tensors are copy-on-write host views again
//
// What streams: the weight of every ddo::nn::Linear (2-D floating, (out, in)), unless its
// module path matches a keep_resident pattern; ddod's planner decides the rest (plan() says
// why). Every other tensor, plain torch::nn::Linear weights included, is resident in ddod's
// slab on the device.
//
// Thread-safety: one forward at a time: a session is not thread-safe.
#ifndef DDO_CLIENT_STREAMING_H_
#define DDO_CLIENT_STREAMING_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <torch/nn/module.h>
#include <torch/types.h>

#include "ddo/status.h"

namespace ddo {

class Client;

struct StreamSettings {
  // Per-session DDO_* settings (docs/configuration.md), e.g. {"DDO_RING_SLOTS", "3"}.
  std::map<std::string, std::string> settings;
  // Patterns (RE2, searched anywhere in the module path) of modules whose weights never
  // stream: they stay in the resident slab.
  std::vector<std::string> keep_resident;
  // Seconds a wait tolerates without any progress of ddod before it throws StreamingError
  // (ddod's death or the session's end are noticed within about 2 s regardless).
  double stall_timeout_s = 120;
  // Refuse a module with plain torch::nn::Linear layers (their weights could only be
  // resident): BindError naming them.
  bool strict = false;
};

// The consumer's counters (the Python client's StreamingSession.stats()).
struct StreamStats {
  uint64_t uses = 0;           // units acquired
  uint64_t streamed_uses = 0;  // in schedule
  uint64_t sync_uses = 0;      // out of schedule (every use of the learning forward)
  uint64_t skipped_uses = 0;   // schedule uses declared done without being used
  uint64_t bytes_used = 0;     // bytes of the units acquired
  double wait_seconds = 0;     // blocked on ddod
  double overhead_us_per_unit = 0;  // bookkeeping per acquired unit, waits excluded
  uint32_t units = 0;
  uint32_t ring_slots = 0;
  uint64_t resident_bytes = 0;
  uint64_t ring_bytes = 0;
};

class StreamingSession {
 public:
  ~StreamingSession();  // closes
  StreamingSession(const StreamingSession&) = delete;
  StreamingSession& operator=(const StreamingSession&) = delete;

  // The root forward's boundaries (ForwardScope calls them). begin_forward releases what a
  // failed forward left held; end_forward sends the learned order after the first forward.
  void begin_forward();
  void end_forward();

  // Waits for the device, gives the module back its host tensors (copy-on-write views of
  // ddod's copy), closes the mappings, and detaches. Idempotent; never throws.
  void close();
  bool closed() const;

  const std::string& session_id() const;
  const std::string& cache_key() const;
  torch::Device device() const;
  // ddod's explanation of the plan (what streams, what stays resident, and why).
  std::string plan() const;
  // The units per cycle, in order (empty until learned).
  std::vector<uint32_t> schedule() const;
  StreamStats stats() const;

  class Impl;

 private:
  friend std::unique_ptr<StreamingSession> stream(Client&, torch::nn::Module&,
                                                  const std::string&, torch::Device,
                                                  const StreamSettings&);
  explicit StreamingSession(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Opens a streaming session of `module` on the READY component `cache_key` (registered with
// Client::register_tensors, or loaded with Client::load_safetensors) on `device` ("cpu": the
// host backend; "cuda:N": a GPU, named to ddod by its UUID). The module is rebound in place.
// Throws BindError (the module does not fit the component), ddo::Error with ddod's code and
// message (NOT_FOUND, INVALID_ARGUMENT for a bad setting, RESOURCE_EXHAUSTED, ...).
std::unique_ptr<StreamingSession> stream(Client& client, torch::nn::Module& module,
                                         const std::string& cache_key, torch::Device device,
                                         const StreamSettings& settings = {});

// Marks one forward of the root module: begin_forward on construction, end_forward on
// destruction (a forward that throws still ends its cycle).
class ForwardScope {
 public:
  explicit ForwardScope(StreamingSession& session) : session_(session) {
    session_.begin_forward();
  }
  ~ForwardScope() {
    try {
      session_.end_forward();
    } catch (...) {  // a destructor must not throw; the next forward reports the failure
    }
  }
  ForwardScope(const ForwardScope&) = delete;
  ForwardScope& operator=(const ForwardScope&) = delete;

 private:
  StreamingSession& session_;
};

}  // namespace ddo

#endif  // DDO_CLIENT_STREAMING_H_
