// File: client-cpp/src/torch/pool_views.h
//
// A component of ddod's pool as CPU tensors: each segment mapped copy-on-write (a write stays in
// this process), a zero-copy view per placed tensor. Each view holds its segment's mapping, so it
// outlives the session that made it.
//
// Thread-safety: as RpcClient's for the calls it makes; the views returned are ordinary CPU
// tensors, each holding its segment's mapping, readable from any thread.
#ifndef DDO_CLIENT_TORCH_POOL_VIEWS_H_
#define DDO_CLIENT_TORCH_POOL_VIEWS_H_

#include <map>
#include <string>

#include <torch/types.h>

#include "ddo/rpc.h"

namespace ddo::detail {

// Name -> view of every tensor `component` places (its layout: an Attach answer's). Throws
// ddo::Error when a segment cannot be opened or mapped, or a placement lies outside it.
std::map<std::string, torch::Tensor> MapComponent(RpcClient& rpc, const ComponentInfo& component);

}  // namespace ddo::detail

#endif  // DDO_CLIENT_TORCH_POOL_VIEWS_H_
