// File: client-cpp/include/ddo/attached.h
//
// ddo::Attached: a host session on a component of ddod's pool, with a zero-copy CPU tensor for
// every entry. The tensors map ddod's shared memory copy-on-write: a write stays in this
// process. The session keeps ddod from evicting the component until close() (or until the
// client's lease ends); a tensor taken from it stays valid after close() (it keeps its mapping).
//
// Thread-safety: an Attached is used by one thread at a time (close() included); the tensors
// taken from it are ordinary CPU tensors and may be read from any thread.
#ifndef DDO_CLIENT_ATTACHED_H_
#define DDO_CLIENT_ATTACHED_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include <torch/nn/module.h>
#include <torch/types.h>

#include "ddo/rpc.h"

namespace ddo {

// What bind() left unbound (always empty when strict).
struct BindResult {
  std::vector<std::string> missing_keys;     // the module has them, the component does not
  std::vector<std::string> unexpected_keys;  // the component has them, the module does not
};

class Attached {
 public:
  Attached(std::shared_ptr<RpcClient> rpc, std::string session_id, ComponentInfo component,
           std::map<std::string, torch::Tensor> tensors);
  Attached(Attached&&) noexcept;
  Attached& operator=(Attached&&) noexcept;
  ~Attached();  // closes

  const std::string& session_id() const { return session_id_; }
  const ComponentInfo& component() const { return component_; }
  // Name -> copy-on-write CPU tensor. ddo::Error (FAILED_PRECONDITION) after close().
  const std::map<std::string, torch::Tensor>& tensors() const;

  // Points every parameter and buffer of `module` at the component's tensor of the same name
  // (the module's own tensors are dropped; requires_grad is kept). Throws BindError listing
  // every name that differs in dtype or shape, and, when strict, every missing or unexpected
  // name; without strict those are returned.
  BindResult bind(torch::nn::Module& module, bool strict = true) const;

  // Detaches (ddod may evict the component again). Idempotent; never throws.
  void close();
  bool closed() const { return rpc_ == nullptr; }

 private:
  std::shared_ptr<RpcClient> rpc_;
  std::string session_id_;
  ComponentInfo component_;
  std::map<std::string, torch::Tensor> tensors_;
};

}  // namespace ddo

#endif  // DDO_CLIENT_ATTACHED_H_
