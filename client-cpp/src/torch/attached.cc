// File: client-cpp/src/torch/attached.cc
#include "ddo/attached.h"

#include <set>
#include <utility>

#include "client-cpp/src/torch/module_tensors.h"

namespace ddo {

Attached::Attached(std::shared_ptr<RpcClient> rpc, std::string session_id,
                   ComponentInfo component, std::map<std::string, torch::Tensor> tensors)
    : rpc_(std::move(rpc)),
      session_id_(std::move(session_id)),
      component_(std::move(component)),
      tensors_(std::move(tensors)) {}

Attached::Attached(Attached&& other) noexcept
    : rpc_(std::move(other.rpc_)),
      session_id_(std::move(other.session_id_)),
      component_(std::move(other.component_)),
      tensors_(std::move(other.tensors_)) {
  other.rpc_.reset();
}

Attached& Attached::operator=(Attached&& other) noexcept {
  if (this != &other) {
    close();
    rpc_ = std::move(other.rpc_);
    other.rpc_.reset();
    session_id_ = std::move(other.session_id_);
    component_ = std::move(other.component_);
    tensors_ = std::move(other.tensors_);
  }
  return *this;
}

Attached::~Attached() { close(); }

const std::map<std::string, torch::Tensor>& Attached::tensors() const {
  if (closed()) {
    throw Error(StatusCode::kFailedPrecondition,
                "the attached component '" + component_.cache_key + "' is closed");
  }
  return tensors_;
}

BindResult Attached::bind(torch::nn::Module& module, bool strict) const {
  const std::map<std::string, torch::Tensor>& views = tensors();
  std::map<std::string, detail::DeclaredTensor> declared;
  for (const auto& [name, view] : views) {
    declared.emplace(name, detail::DeclaredTensor{view.scalar_type(), view.sizes().vec()});
  }
  detail::ModuleMatch match = detail::MatchModule(module, declared);
  if (!match.mismatched.empty() || (strict && !match.ok())) {
    std::string text = "cannot bind '" + component_.cache_key + "' to the module: ";
    std::string separator;
    if (!match.missing.empty()) {
      text += std::to_string(match.missing.size()) + " missing from the component: " +
              detail::DescribeNames(match.missing);
      separator = "; ";
    }
    if (!match.unexpected.empty()) {
      text += separator + std::to_string(match.unexpected.size()) + " not in the module: " +
              detail::DescribeNames(match.unexpected);
      separator = "; ";
    }
    if (!match.mismatched.empty()) {
      text += separator + std::to_string(match.mismatched.size()) +
              " with another shape or dtype: ";
      for (size_t i = 0; i < match.mismatched.size() && i < 20; ++i) {
        text += (i ? "; " : "") + match.mismatched[i];
      }
    }
    throw BindError(StatusCode::kInvalidArgument, text);
  }
  for (const auto& [source, group] : match.groups) detail::Rebind(group, views.at(source));
  return BindResult{match.missing, match.unexpected};
}

void Attached::close() {
  if (rpc_ == nullptr) return;
  // NOT_FOUND / UNAVAILABLE: the session or ddod is gone already; nothing is left to give back.
  (void)rpc_->detach(session_id_);
  rpc_.reset();
  tensors_.clear();
}

}  // namespace ddo
