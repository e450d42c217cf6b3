// File: client-cpp/src/torch/linear.cc
//
// ddo::nn::Linear: torch::nn::Linear's registration, initialisation and forward, plus the
// streamed forward (the weight from a session's ring).
#include <cmath>
#include <string>
#include <tuple>
#include <utility>

#include <torch/autograd.h>
#include <torch/nn/functional/linear.h>
#include <torch/nn/init.h>

#include "ddo/nn.h"
#include "torch/stream_tap.h"

namespace ddo {
namespace nn {

LinearImpl::LinearImpl(const torch::nn::LinearOptions& options_) : options(options_) {
  reset();
}

void LinearImpl::reset() {
  tap_.reset();  // a clone (Cloneable::clone copies, then resets) is not streamed
  weight = register_parameter(
      "weight", torch::empty({options.out_features(), options.in_features()}));
  if (options.bias()) {
    bias = register_parameter("bias", torch::empty(options.out_features()));
  } else {
    bias = register_parameter("bias", {}, /*requires_grad=*/false);
  }
  reset_parameters();
}

// As torch::nn::Linear (and torch.nn.Linear): kaiming_uniform(a=sqrt(5)), bias U(+-1/sqrt(fan_in)).
void LinearImpl::reset_parameters() {
  torch::nn::init::kaiming_uniform_(weight, std::sqrt(5));
  if (bias.defined()) {
    int64_t fan_in = 0;
    int64_t fan_out = 0;
    std::tie(fan_in, fan_out) = torch::nn::init::_calculate_fan_in_and_fan_out(weight);
    const double bound = 1 / std::sqrt(static_cast<double>(fan_in));
    torch::nn::init::uniform_(bias, -bound, bound);
  }
}

void LinearImpl::pretty_print(std::ostream& stream) const {
  stream << std::boolalpha << "ddo::nn::Linear(in_features=" << options.in_features()
         << ", out_features=" << options.out_features() << ", bias=" << options.bias()
         << (streamed() ? ", streamed" : "") << ")";
}

torch::Tensor LinearImpl::forward(const torch::Tensor& input) {
  if (tap_ != nullptr) return tap_->Forward(input, bias);
  return torch::nn::functional::linear(input, weight, bias);
}

}  // namespace nn

namespace detail {
namespace {

// The ring slot holding a streamed weight is reused long before a backward pass, so a
// backward through it would compute with another unit's bytes: it raises instead.
class NoBackwardThroughStream : public torch::autograd::Function<NoBackwardThroughStream> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* context,
                               const torch::Tensor& input, const torch::Tensor& weight,
                               const torch::Tensor& bias, const std::string& module_path) {
    context->saved_data["module_path"] = module_path;
    return torch::nn::functional::linear(input, weight, bias);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* context,
                                                 torch::autograd::variable_list) {
    throw std::runtime_error(
        context->saved_data["module_path"].toStringRef() +
        ": cannot backpropagate through a Linear whose weight DDO streams (its device copy "
        "sits in a ring slot that is reused long before the backward pass). Training through "
        "streamed weights is not supported: run inference under torch::NoGradGuard or "
        "c10::InferenceMode, or close the session first to train on the module's own copy.");
  }
};

}  // namespace

torch::Tensor StreamTap::Forward(const torch::Tensor& input, const torch::Tensor& bias) const {
  torch::Tensor weight = source_->Acquire(unit_).at(index_);
  const auto dtype = input.scalar_type();
  if (weight.scalar_type() != dtype) weight = weight.to(dtype);
  torch::Tensor used_bias = bias;
  if (bias.defined() && bias.scalar_type() != dtype) used_bias = bias.to(dtype);
  if (input.requires_grad() && torch::GradMode::is_enabled()) {
    return NoBackwardThroughStream::apply(input, weight, used_bias, module_path_);
  }
  return torch::nn::functional::linear(input, weight, used_bias);
}

}  // namespace detail
}  // namespace ddo
