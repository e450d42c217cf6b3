// File: client-cpp/src/consumer/streamed_linear.cc
#include "client-cpp/src/consumer/streamed_linear.h"

#include <torch/csrc/autograd/custom_function.h>

#include "client-cpp/src/consumer/byte_cast.h"
#include "ddo/status.h"

namespace ddo::consumer {
namespace {

// The bias, passed to the autograd Function as a non-tensor argument: torch 1.13's
// Function::apply records every tensor argument's device, and an undefined bias (a Linear
// without one) has none. The backward raises anyway, so the bias needs no gradient edge.
struct OptionalBias {
  at::Tensor tensor;  // undefined: none
};

// The forward in grad mode: a node whose backward raises (see the header).
struct NoBackwardThroughStream : public torch::autograd::Function<NoBackwardThroughStream> {
  static at::Tensor forward(torch::autograd::AutogradContext* context, const at::Tensor& input,
                            const at::Tensor& weight, const OptionalBias& bias,
                            const std::string& module_path, LinearFunction linear,
                            const char* remedy) {
    context->saved_data["module_path"] = module_path;
    context->saved_data["remedy"] = std::string(remedy);
    return linear(input, weight, bias.tensor);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* context,
                                                 torch::autograd::variable_list) {
    const std::string module_path = context->saved_data["module_path"].toStringRef();
    const std::string remedy = context->saved_data["remedy"].toStringRef();
    throw Error(StatusCode::kFailedPrecondition,
                module_path +
                    ": cannot backpropagate through a Linear whose weight DDO streams (its device "
                    "copy sits in a ring slot that is reused long before the backward pass). "
                    "Training through streamed weights is not supported: " + remedy);
  }
};

}  // namespace

at::Tensor AtenLinear(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& bias) {
  return at::linear(input, weight,
                    bias.defined() ? c10::optional<at::Tensor>(bias) : c10::nullopt);
}

at::Tensor StreamedLinear(const at::Tensor& input, const at::Tensor& weight,
                          const at::Tensor& bias, const std::string& module_path,
                          LinearFunction linear, const char* remedy) {
  const at::ScalarType dtype = input.scalar_type();
  // An fp8 weight goes through DDO's cast kernel when it is installed (byte_cast.h).
  const at::Tensor used_weight =
      weight.scalar_type() == dtype ? weight : CastWeight(weight, dtype);
  at::Tensor used_bias = bias;
  if (bias.defined() && bias.scalar_type() != dtype) used_bias = bias.to(dtype);
  if (input.requires_grad() && at::GradMode::is_enabled()) {
    return NoBackwardThroughStream::apply(input, used_weight, OptionalBias{used_bias},
                                          module_path, linear, remedy);
  }
  return linear(input, used_weight, used_bias);
}

}  // namespace ddo::consumer
