// File: client-cpp/src/consumer/streamed_linear.h
//
// The forward of a Linear whose weight streams (the port of py/streamed_linear.py without its
// Python-only parts: fused LoRA, weight guards, torch.compile). The weight is the ring's view
// of the unit that holds it; weight and bias are cast to the input's dtype when they differ
// (an fp8 weight by byte_cast.h's kernel when it is installed).
// In grad mode with an input that requires grad, the result carries an autograd node whose
// backward raises: the ring slot holding the weight is reused long before a backward pass,
// which would compute with another unit's bytes.
//
// Thread-safety: pure functions of their arguments, safe from any thread; the ring view passed in
// must stay valid for the call (the session's one-forward-at-a-time rule sees to it).
#ifndef DDO_CLIENT_CONSUMER_STREAMED_LINEAR_H_
#define DDO_CLIENT_CONSUMER_STREAMED_LINEAR_H_

#include <ATen/ATen.h>

#include <string>

namespace ddo::consumer {

// The linear function a streamed Linear computes with: the one its unstreamed forward uses, so
// the results are bitwise equal. Python's F.linear is at::linear (the default); libtorch's C++
// torch::nn::functional::linear is another function (for a 3-D input it does matmul, then adds
// the bias, where at::linear fuses the add), so ddo::nn::Linear passes that one.
using LinearFunction = at::Tensor (*)(const at::Tensor& input, const at::Tensor& weight,
                                      const at::Tensor& bias);
at::Tensor AtenLinear(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& bias);

// What the backward's error advises a C++ runner; the Python extension passes the Python
// client's words.
inline constexpr const char* kCppTrainingRemedy =
    "run inference under torch::NoGradGuard / c10::InferenceMode, or close the streaming "
    "session first to train on the module's own copy.";

// input @ weight.T + bias, with `weight` (a ring view) and `bias` (undefined: none) cast to
// input's dtype. `module_path` names the Linear in the backward's error, which ends with
// `remedy`.
at::Tensor StreamedLinear(const at::Tensor& input, const at::Tensor& weight,
                          const at::Tensor& bias, const std::string& module_path,
                          LinearFunction linear = AtenLinear,
                          const char* remedy = kCppTrainingRemedy);

}  // namespace ddo::consumer

#endif  // DDO_CLIENT_CONSUMER_STREAMED_LINEAR_H_
