// File: client-cpp/examples/transformer_model.h
//
// A transformer written with libtorch's C++ modules, the way a C++ runner would declare a
// model it streams: its large projections are ddo::nn::Linear (streamable), the small input
// projection a plain torch::nn::Linear (resident), the norms plain modules (resident). The
// example runner, the client's tests and the C++ benchmark use it.
//
// Module paths follow the diffusers convention ddod's planner groups by: "blocks.<i>.attn.q",
// "blocks.<i>.mlp_up", ... so DDO_STREAM_UNIT=block streams one block per unit.
//
// Thread-safety: as torch::nn::Module's: build it on one thread; while a session streams the
// model, one forward at a time (ddo/streaming.h).
#ifndef DDO_CLIENT_EXAMPLES_TRANSFORMER_MODEL_H_
#define DDO_CLIENT_EXAMPLES_TRANSFORMER_MODEL_H_

#include <cmath>
#include <cstdint>

#include <torch/torch.h>

#include "ddo/nn.h"

namespace ddo_example {

struct TransformerConfig {
  int64_t dim = 768;
  int64_t heads = 12;
  int64_t mlp_ratio = 4;
  int64_t blocks = 4;
  int64_t input_dim = 64;
};

class AttentionImpl : public torch::nn::Module {
 public:
  AttentionImpl(int64_t dim, int64_t heads)
      : heads_(heads),
        q_(register_module("q", ddo::nn::Linear(dim, dim))),
        k_(register_module("k", ddo::nn::Linear(dim, dim))),
        v_(register_module("v", ddo::nn::Linear(dim, dim))),
        o_(register_module("o", ddo::nn::Linear(dim, dim))) {}

  // x: [batch, tokens, dim].
  torch::Tensor forward(const torch::Tensor& x) {
    const int64_t batch = x.size(0);
    const int64_t tokens = x.size(1);
    auto heads = [&](const torch::Tensor& t) {
      return t.view({batch, tokens, heads_, -1}).transpose(1, 2);
    };
    torch::Tensor q = heads(q_(x));
    torch::Tensor k = heads(k_(x));
    torch::Tensor v = heads(v_(x));
    const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
    torch::Tensor weights = torch::softmax(torch::matmul(q, k.transpose(-2, -1)) * scale, -1);
    torch::Tensor mixed = torch::matmul(weights, v).transpose(1, 2).reshape({batch, tokens, -1});
    return o_(mixed);
  }

 private:
  int64_t heads_;
  ddo::nn::Linear q_, k_, v_, o_;
};
TORCH_MODULE(Attention);

class BlockImpl : public torch::nn::Module {
 public:
  BlockImpl(int64_t dim, int64_t heads, int64_t mlp_ratio)
      : norm1_(register_module("norm1", torch::nn::LayerNorm(
                                            torch::nn::LayerNormOptions({dim})))),
        attn_(register_module("attn", Attention(dim, heads))),
        norm2_(register_module("norm2", torch::nn::LayerNorm(
                                            torch::nn::LayerNormOptions({dim})))),
        mlp_up_(register_module("mlp_up", ddo::nn::Linear(dim, dim * mlp_ratio))),
        mlp_down_(register_module("mlp_down", ddo::nn::Linear(dim * mlp_ratio, dim))) {}

  torch::Tensor forward(torch::Tensor x) {
    x = x + attn_(norm1_(x));
    return x + mlp_down_(torch::gelu(mlp_up_(norm2_(x))));
  }

 private:
  torch::nn::LayerNorm norm1_;
  Attention attn_;
  torch::nn::LayerNorm norm2_;
  ddo::nn::Linear mlp_up_, mlp_down_;
};
TORCH_MODULE(Block);

class TransformerImpl : public torch::nn::Module {
 public:
  explicit TransformerImpl(const TransformerConfig& config)
      : embed_(register_module("embed", torch::nn::Linear(config.input_dim, config.dim))),
        blocks_(register_module("blocks", torch::nn::ModuleList())),
        norm_(register_module("norm", torch::nn::LayerNorm(
                                          torch::nn::LayerNormOptions({config.dim})))),
        head_(register_module("head", ddo::nn::Linear(config.dim, config.input_dim))) {
    for (int64_t i = 0; i < config.blocks; ++i) {
      blocks_->push_back(Block(config.dim, config.heads, config.mlp_ratio));
    }
  }

  // x: [batch, tokens, input_dim] -> [batch, tokens, input_dim].
  torch::Tensor forward(const torch::Tensor& x) {
    torch::Tensor h = embed_(x);
    for (const auto& block : *blocks_) h = block->as<BlockImpl>()->forward(h);
    return head_(norm_(h));
  }

 private:
  torch::nn::Linear embed_;
  torch::nn::ModuleList blocks_;
  torch::nn::LayerNorm norm_;
  ddo::nn::Linear head_;
};
TORCH_MODULE(Transformer);

// Fills every parameter with normal(0, 0.02) (norms' weights around 1), deterministically.
inline void InitWeights(torch::nn::Module& model, uint64_t seed) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(seed);
  for (auto& item : model.named_parameters()) {
    const std::string& name = item.key();
    torch::Tensor p = item.value();
    const bool norm_weight = name.find("norm") != std::string::npos &&
                             name.size() >= 6 && name.compare(name.size() - 6, 6, "weight") == 0;
    if (norm_weight) {
      p.normal_(1.0, 0.02);
    } else {
      p.normal_(0.0, 0.02);
    }
  }
}

}  // namespace ddo_example

#endif  // DDO_CLIENT_EXAMPLES_TRANSFORMER_MODEL_H_
