// File: client-cpp/tests/streamed_linear_test.cc
//
// The streamed Linear's forward: torch's Linear on the ring's weight, with weight and bias
// cast to the input's dtype, and a backward that refuses to run.
#include "client-cpp/src/consumer/streamed_linear.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>

#include "ddo/status.h"

namespace ddo::consumer {
namespace {

TEST(StreamedLinear, ComputesTorchsLinearBitwise) {
  torch::manual_seed(7);
  const at::Tensor input = torch::randn({3, 16});
  const at::Tensor weight = torch::randn({8, 16});
  const at::Tensor bias = torch::randn({8});
  EXPECT_TRUE(torch::equal(StreamedLinear(input, weight, bias, "m"),
                           at::linear(input, weight, bias)));
  EXPECT_TRUE(torch::equal(StreamedLinear(input, weight, at::Tensor(), "m"),
                           at::linear(input, weight)));
}

TEST(StreamedLinear, CastsWeightAndBiasToTheInputsDtype) {
  torch::manual_seed(7);
  const at::Tensor input = torch::randn({2, 8}).to(torch::kBFloat16);
  const at::Tensor weight = torch::randn({4, 8});
  const at::Tensor bias = torch::randn({4});
  const at::Tensor out = StreamedLinear(input, weight, bias, "m");
  EXPECT_EQ(out.scalar_type(), torch::kBFloat16);
  EXPECT_TRUE(torch::equal(
      out, at::linear(input, weight.to(torch::kBFloat16), bias.to(torch::kBFloat16))));
}

TEST(StreamedLinear, ABackwardThroughTheRingRaises) {
  const at::Tensor input = torch::randn({2, 8}).requires_grad_(true);
  const at::Tensor out = StreamedLinear(input, torch::randn({4, 8}), torch::randn({4}),
                                        "blocks.0.attn.to_q");
  ASSERT_TRUE(out.requires_grad());
  try {
    out.sum().backward();
    FAIL() << "no exception";
  } catch (const std::exception& error) {
    EXPECT_NE(std::string(error.what()).find(
                  "blocks.0.attn.to_q: cannot backpropagate through a Linear whose weight DDO "
                  "streams"),
              std::string::npos)
        << error.what();
  }
  // A Linear without bias in grad mode (torch 1.13's autograd Function took an undefined
  // bias for a tensor and failed in its forward: "tensor does not have a device").
  const at::Tensor unbiased = StreamedLinear(input, torch::randn({4, 8}), at::Tensor(), "m");
  ASSERT_TRUE(unbiased.requires_grad());
  EXPECT_THROW(unbiased.sum().backward(), std::exception);
  torch::NoGradGuard no_grad;  // inference: no node at all
  EXPECT_FALSE(StreamedLinear(input, torch::randn({4, 8}), at::Tensor(), "m").requires_grad());
}

}  // namespace
}  // namespace ddo::consumer
