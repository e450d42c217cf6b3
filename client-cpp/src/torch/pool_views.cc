// File: client-cpp/src/torch/pool_views.cc
#include "client-cpp/src/torch/pool_views.h"

#include <memory>
#include <vector>

#include "client-cpp/src/torch/dtypes.h"
#include "client-cpp/src/torch/shared_mapping.h"

namespace ddo::detail {

std::map<std::string, torch::Tensor> MapComponent(RpcClient& rpc, const ComponentInfo& component) {
  std::vector<std::shared_ptr<SharedMapping>> mappings;
  for (const Segment& segment : component.segments) {
    UniqueFd fd = ValueOrThrow(segment.backing_file
                                   ? rpc.open_backing_file(segment.shm_name)
                                   : rpc.open_segment(segment.shm_name, /*writable=*/false));
    mappings.push_back(ValueOrThrow(SharedMapping::Map(fd.get(), segment.size_bytes,
                                                       MapMode::kCopyOnWrite, segment.shm_name)));
  }
  std::map<std::string, const TensorSpec*> specs;
  for (const TensorSpec& spec : component.tensors) specs.emplace(spec.name, &spec);
  std::map<std::string, torch::Tensor> views;
  for (const Placement& placement : component.placements) {
    auto spec = specs.find(placement.name);
    if (spec == specs.end() || placement.segment >= mappings.size()) {
      throw Error(StatusCode::kInternal,
                  "ddod placed '" + placement.name + "' without a tensor spec or segment");
    }
    const std::shared_ptr<SharedMapping>& mapping = mappings[placement.segment];
    if (placement.offset + placement.byte_size > mapping->size() ||
        placement.byte_size != spec->second->byte_size) {
      throw Error(StatusCode::kInternal,
                  "ddod placed '" + placement.name + "' at bytes [" +
                      std::to_string(placement.offset) + ", " +
                      std::to_string(placement.offset + placement.byte_size) + ") of a " +
                      std::to_string(mapping->size()) + "-byte segment; its spec says " +
                      std::to_string(spec->second->byte_size) + " bytes");
    }
    std::optional<c10::ScalarType> type = TorchType(static_cast<int>(spec->second->dtype));
    if (!type) {
      throw Error(StatusCode::kUnimplemented,
                  "tensor '" + placement.name + "' has a dtype this libtorch cannot represent");
    }
    std::shared_ptr<SharedMapping> keep = mapping;
    views.emplace(placement.name,
                  torch::from_blob(keep->data() + placement.offset, spec->second->shape,
                                   [keep](void*) mutable { keep.reset(); },
                                   torch::TensorOptions().dtype(*type).device(torch::kCPU)));
  }
  return views;
}

}  // namespace ddo::detail
