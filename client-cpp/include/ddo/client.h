// File: client-cpp/include/ddo/client.h
//
// ddo::Client: the torch layer of the C++ client. It wraps a connected ddo::RpcClient (rpc.h:
// the address rules, the identity check, the lease, a private ddod when none runs) and speaks
// in torch tensors and modules; failures throw ddo::Error (status.h) carrying ddod's code and
// message.
//
//   ddo::Client client = ddo::Client::Connect();        // DDO_DAEMON, or the default sockets
//   client.register_module("my-model", *model);         // a warm hit when ddod has it already
//   ddo::Attached weights = client.attach("my-model");  // zero-copy, copy-on-write host views
//   weights.bind(*other_model);
//
// Streaming sessions: ddo::stream (streaming.h).
//
// Thread-safety: as RpcClient's (calls from several threads are fine).
#ifndef DDO_CLIENT_CLIENT_H_
#define DDO_CLIENT_CLIENT_H_

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <torch/nn/module.h>
#include <torch/types.h>

#include "ddo/attached.h"
#include "ddo/rpc.h"
#include "ddo/status.h"

namespace ddo {

struct RegisterOptions {
  // Send an xxh3-64 content hash of the tensors, so ddod can share identical bytes stored under
  // another key.
  bool content_hash = false;
};

struct RegisterResult {
  ComponentInfo component;
  bool warm_hit = false;  // ddod had it: nothing was uploaded
  uint64_t uploaded_bytes = 0;
};

class Client {
 public:
  // Connects (rpc.h's rules); throws ddo::Error (UNAVAILABLE listing every address tried,
  // PERMISSION_DENIED for an untrusted daemon, ...) or UntrustedDaemonError.
  static Client Connect(const ConnectOptions& options = ConnectOptions());
  explicit Client(RpcClient rpc) : rpc_(std::make_shared<RpcClient>(std::move(rpc))) {}

  RpcClient& rpc() { return *rpc_; }
  const std::shared_ptr<RpcClient>& shared_rpc() const { return rpc_; }

  DaemonInfo info();
  bool healthy();
  std::vector<ComponentInfo> components();
  ComponentInfo component(const std::string& cache_key);
  uint64_t evict(const std::string& cache_key);

  // Stores `tensors` (CPU, any layout: made contiguous) as the component `cache_key`, one
  // streaming unit per tensor. Throws ddo::Error (INVALID_ARGUMENT: a dtype the protocol has no
  // code for, a tensor not on the CPU; ddod's refusals).
  RegisterResult register_tensors(const std::string& cache_key,
                                  const std::map<std::string, torch::Tensor>& tensors,
                                  const RegisterOptions& options = RegisterOptions());
  // Stores every parameter and buffer of `module` under its dotted name, with its module path
  // and class, so ddod plans it as it plans the same model from Python.
  RegisterResult register_module(const std::string& cache_key, torch::nn::Module& module,
                                 const RegisterOptions& options = RegisterOptions());
  // ddod reads the files (this process opens them and passes the descriptors).
  LoadResult load_safetensors(const std::string& cache_key, const std::vector<std::string>& paths,
                              const LoadOptions& options = LoadOptions());

  // A host session on the component: zero-copy, copy-on-write views of ddod's pool.
  Attached attach(const std::string& cache_key);

 private:
  std::shared_ptr<RpcClient> rpc_;
};

}  // namespace ddo

#endif  // DDO_CLIENT_CLIENT_H_
