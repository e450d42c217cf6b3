// File: client-cpp/src/torch/linear.cc
//
// ddo::nn::Linear: torch::nn::Linear's registration, initialisation and forward; while a
// session streams it, consumer::StreamedLinear with the weight from the session's ring.
#include <cmath>
#include <string>
#include <tuple>
#include <utility>

#include <torch/nn/functional/linear.h>
#include <torch/nn/init.h>

#include "client-cpp/src/consumer/streamed_linear.h"
#include "ddo/nn.h"
#include "client-cpp/src/torch/stream_tap.h"

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

// torch::nn::Linear's own function, so streamed results are bitwise those of the unstreamed
// module (it differs from at::linear for 3-D inputs).
torch::Tensor CppApiLinear(const torch::Tensor& input, const torch::Tensor& weight,
                           const torch::Tensor& bias) {
  return torch::nn::functional::linear(input, weight, bias);
}

}  // namespace

torch::Tensor StreamTap::Forward(const torch::Tensor& input, const torch::Tensor& bias) const {
  return consumer::StreamedLinear(input, source_->Acquire(unit_).at(index_), bias, module_path_,
                                  CppApiLinear);
}

}  // namespace detail
}  // namespace ddo
