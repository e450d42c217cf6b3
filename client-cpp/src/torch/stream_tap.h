// File: client-cpp/src/torch/stream_tap.h
//
// What a streamed ddo::nn::Linear holds while a session serves its weight: the session's unit
// source and where the weight sits in its unit. The session owns the source; a Linear keeps it
// alive only until the session clears the tap at close (after which the source refuses).
//
// Thread-safety: none of its own: a StreamTap is immutable and Forward runs on the session's one
// runner thread (one forward at a time); a UnitSource serves that thread only.
#ifndef DDO_CLIENT_TORCH_STREAM_TAP_H_
#define DDO_CLIENT_TORCH_STREAM_TAP_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <torch/types.h>

namespace ddo::detail {

// The tensors of streamed units, as a session's consumer hands them out.
class UnitSource {
 public:
  virtual ~UnitSource() = default;
  // The tensors of `unit` (views of its ring slot on the session's device), valid until another
  // unit is acquired or the forward ends. Throws ddo::StreamingError when it cannot serve.
  virtual const std::vector<torch::Tensor>& Acquire(uint32_t unit) = 0;
};

class StreamTap {
 public:
  StreamTap(std::shared_ptr<UnitSource> source, uint32_t unit, uint32_t index,
            std::string module_path)
      : source_(std::move(source)), unit_(unit), index_(index),
        module_path_(std::move(module_path)) {}

  // The streamed Linear's forward: the weight from the ring, cast like the bias to the input's
  // dtype when they differ; in grad mode, a result whose backward raises.
  torch::Tensor Forward(const torch::Tensor& input, const torch::Tensor& bias) const;

 private:
  std::shared_ptr<UnitSource> source_;
  uint32_t unit_;
  uint32_t index_;
  std::string module_path_;
};

}  // namespace ddo::detail

#endif  // DDO_CLIENT_TORCH_STREAM_TAP_H_
