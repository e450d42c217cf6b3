// File: client-cpp/include/ddo/nn.h
//
// ddo::nn::Linear: a drop-in for torch::nn::Linear whose weight a streaming session can serve.
//
// libtorch's C++ modules have no forward hooks and LinearImpl::forward is not virtual: a parent
// calls it through its typed torch::nn::Linear member, so no session can redirect a plain
// torch::nn::Linear. A model meant to stream declares its large projections as ddo::nn::Linear
// instead: same options, same parameter names ("weight", "bias"), same initialisation and, when
// nothing streams it, the same forward (torch::nn::functional::linear). While a session streams
// it, forward takes the weight from the session's ring; plain torch::nn::Linear weights stay
// resident in ddod's slab (the results are the same, only the memory differs).
//
// Thread-safety: as torch::nn::Linear's; while a session streams it, the session's rule holds
// (one forward at a time, streaming.h).
#ifndef DDO_CLIENT_NN_H_
#define DDO_CLIENT_NN_H_

#include <cstdint>
#include <memory>
#include <ostream>

#include <torch/nn/cloneable.h>
#include <torch/nn/module.h>
#include <torch/nn/options/linear.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

namespace ddo {

class StreamingSession;

namespace detail {
// Where a streamed Linear's weight comes from while a session streams it (client-cpp/src/).
class StreamTap;
}  // namespace detail

namespace nn {

class LinearImpl : public torch::nn::Cloneable<LinearImpl> {
 public:
  LinearImpl(int64_t in_features, int64_t out_features)
      : LinearImpl(torch::nn::LinearOptions(in_features, out_features)) {}
  explicit LinearImpl(const torch::nn::LinearOptions& options);

  // Registers "weight" and "bias" as torch::nn::Linear does, and initialises them the same way.
  // A clone starts unstreamed.
  void reset() override;
  void reset_parameters();
  void pretty_print(std::ostream& stream) const override;

  // input @ weight^T + bias. While streamed, the weight (and bias) are cast to the input's
  // dtype when they differ, and a backward pass through the streamed weight raises.
  torch::Tensor forward(const torch::Tensor& input);

  // Whether a session serves this module's weight now.
  bool streamed() const { return tap_ != nullptr; }

  torch::nn::LinearOptions options;
  torch::Tensor weight;
  torch::Tensor bias;  // undefined without a bias

 private:
  friend class ddo::StreamingSession;  // sets the tap when it opens, clears it when it closes
  std::shared_ptr<detail::StreamTap> tap_;
};

TORCH_MODULE(Linear);

}  // namespace nn
}  // namespace ddo

#endif  // DDO_CLIENT_NN_H_
