// File: client-cpp/src/torch/client.cc
#include "ddo/client.h"

#include <cstdio>
#include <utility>

#if __has_include(<xxhash.h>)
#define XXH_INLINE_ALL
#include <xxhash.h>
#define DDO_CLIENT_HAS_XXHASH 1
#endif

#include "client-cpp/src/torch/dtypes.h"
#include "client-cpp/src/torch/module_tensors.h"
#include "client-cpp/src/torch/pool_views.h"

namespace ddo {
namespace {

struct Entry {
  std::string name;
  torch::Tensor tensor;  // contiguous, CPU
  std::string module_path;
  std::string module_class;
  bool is_buffer = false;
};

// "Linear" for ddo::nn::Linear and torch::nn::Linear (ddod's planner knows Linears by that
// name, as Python's nn.Linear reports it); otherwise the class's own short name.
std::string ModuleClass(const torch::nn::Module& owner) {
  std::string name = owner.name();  // demangled: "ddo::nn::LinearImpl"
  const size_t colon = name.rfind("::");
  if (colon != std::string::npos) name = name.substr(colon + 2);
  const std::string suffix = "Impl";
  if (name.size() > suffix.size() &&
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
    name.resize(name.size() - suffix.size());
  }
  return name;
}

Entry MakeEntry(std::string name, const torch::Tensor& tensor, std::string module_path,
                std::string module_class, bool is_buffer) {
  if (!tensor.defined()) {
    throw Error(StatusCode::kInvalidArgument, "tensor '" + name + "' is undefined");
  }
  if (!tensor.device().is_cpu() || tensor.is_sparse() || tensor.is_quantized()) {
    throw Error(StatusCode::kInvalidArgument,
                "tensor '" + name + "' must be a dense CPU tensor to be registered, not " +
                    tensor.toString());
  }
  if (!detail::DtypeCode(tensor.scalar_type())) {
    throw Error(StatusCode::kInvalidArgument,
                "tensor '" + name + "' has dtype " + detail::TypeName(tensor.scalar_type()) +
                    ", which the protocol has no code for");
  }
  return Entry{std::move(name), tensor.detach().contiguous(), std::move(module_path),
               std::move(module_class), is_buffer};
}

std::string ContentHash(const std::vector<Entry>& entries) {
#ifdef DDO_CLIENT_HAS_XXHASH
  XXH3_state_t* state = XXH3_createState();
  XXH3_64bits_reset(state);
  for (const Entry& entry : entries) {
    XXH3_64bits_update(state, entry.tensor.data_ptr(), entry.tensor.nbytes());
  }
  const unsigned long long value = XXH3_64bits_digest(state);
  XXH3_freeState(state);
  char text[32];
  std::snprintf(text, sizeof text, "xxh3-64:%016llx", value);
  return text;
#else
  (void)entries;
  throw Error(StatusCode::kUnimplemented,
              "this build of the client has no xxhash: register without content_hash");
#endif
}

RegisterResult Register(RpcClient& rpc, const std::string& cache_key,
                        const std::vector<Entry>& entries, const RegisterOptions& options) {
  std::vector<TensorSpec> specs;
  specs.reserve(entries.size());
  for (size_t i = 0; i < entries.size(); ++i) {
    const Entry& entry = entries[i];
    TensorSpec spec;
    spec.name = entry.name;
    spec.dtype = static_cast<DType>(*detail::DtypeCode(entry.tensor.scalar_type()));
    spec.shape = entry.tensor.sizes().vec();
    spec.byte_size = entry.tensor.nbytes();
    spec.module_path = entry.module_path;
    spec.module_class = entry.module_class;
    spec.unit = static_cast<uint32_t>(i);  // one unit per tensor; ddod groups blocks itself
    spec.is_buffer = entry.is_buffer;
    specs.push_back(std::move(spec));
  }
  const std::string hash = options.content_hash ? ContentHash(entries) : std::string();
  Upload upload = ValueOrThrow(rpc.register_component(cache_key, specs, hash));
  RegisterResult result;
  if (upload.warm_hit) {
    result.component = std::move(upload.component);
    result.warm_hit = true;
    return result;
  }
  std::map<std::string, TensorBytes> bytes;
  for (const Entry& entry : entries) {
    bytes.emplace(entry.name, TensorBytes{entry.tensor.data_ptr(), entry.tensor.nbytes()});
    result.uploaded_bytes += entry.tensor.nbytes();
  }
  Status written = rpc.write_upload(upload, bytes);
  if (!written.ok()) {
    (void)rpc.abort(upload.upload_id);  // give the segments back; the write's error matters
    throw Error(written);
  }
  result.component = ValueOrThrow(rpc.commit(upload.upload_id));
  return result;
}

}  // namespace

Client Client::Connect(const ConnectOptions& options) {
  StatusOr<RpcClient> rpc = RpcClient::Connect(options);
  if (!rpc.ok() && rpc.status().code() == StatusCode::kPermissionDenied) {
    throw UntrustedDaemonError(rpc.status());
  }
  return Client(ValueOrThrow(std::move(rpc)));
}

DaemonInfo Client::info() { return ValueOrThrow(rpc_->info()); }

bool Client::healthy() {
  StatusOr<std::string> status = rpc_->health();
  return status.ok() && *status == "SERVING";
}

std::vector<ComponentInfo> Client::components() { return ValueOrThrow(rpc_->components()); }

ComponentInfo Client::component(const std::string& cache_key) {
  return ValueOrThrow(rpc_->component(cache_key));
}

uint64_t Client::evict(const std::string& cache_key) {
  return ValueOrThrow(rpc_->evict(cache_key));
}

RegisterResult Client::register_tensors(const std::string& cache_key,
                                        const std::map<std::string, torch::Tensor>& tensors,
                                        const RegisterOptions& options) {
  std::vector<Entry> entries;
  for (const auto& [name, tensor] : tensors) {
    const size_t dot = name.rfind('.');
    entries.push_back(MakeEntry(name, tensor, dot == std::string::npos ? "" : name.substr(0, dot),
                                "", false));
  }
  return Register(*rpc_, cache_key, entries, options);
}

RegisterResult Client::register_module(const std::string& cache_key, torch::nn::Module& module,
                                       const RegisterOptions& options) {
  std::vector<Entry> entries;
  for (const auto& group : detail::AliasGroups(detail::ModuleTensors(module))) {
    const detail::ModuleTensor& first = group.front();  // a tied tensor is stored once
    entries.push_back(MakeEntry(first.name, first.tensor, first.module_path,
                                ModuleClass(*first.owner), first.is_buffer));
  }
  return Register(*rpc_, cache_key, entries, options);
}

LoadResult Client::load_safetensors(const std::string& cache_key,
                                    const std::vector<std::string>& paths,
                                    const LoadOptions& options) {
  return ValueOrThrow(rpc_->load_safetensors(cache_key, paths, options));
}

Attached Client::attach(const std::string& cache_key) {
  AttachAnswer answer = ValueOrThrow(rpc_->attach(cache_key));
  // From here on a failure must give the session back.
  struct DetachOnFailure {
    RpcClient& rpc;
    const std::string& session_id;
    bool armed = true;
    ~DetachOnFailure() {
      if (armed) (void)rpc.detach(session_id);
    }
  } guard{*rpc_, answer.session_id};

  std::map<std::string, torch::Tensor> tensors = detail::MapComponent(*rpc_, answer.component);
  guard.armed = false;
  return Attached(rpc_, answer.session_id, answer.component, std::move(tensors));
}

}  // namespace ddo
