// File: daemon/ctl/layout_file.h
//
// The component layout file of `ddoctl plan --explain LAYOUT.json`: a component's tensor table
// without its bytes, and optionally the component name, device and settings to plan with.
//
//   {"component": "transformer", "device": "cuda:0", "settings": {"DDO_PRESET": "auto"},
//    "tensors": [{"name": "blocks.0.attn.to_q.weight", "dtype": "BF16", "shape": [3072, 3072],
//                 "module_path": "blocks.0.attn.to_q", "module_class": "Linear"}, ...]}
//
// dtype names are safetensors' (BF16, F16, F32, ...). The Python client writes such a file for
// any torch module (diffusers_dynamic_offloader.layout).
//
// Thread-safety: a free function that reads one file; nothing shared.
#ifndef DDO_DAEMON_CTL_LAYOUT_FILE_H_
#define DDO_DAEMON_CTL_LAYOUT_FILE_H_

#include <string>

#include "absl/status/statusor.h"
#include "ddo/v1/sessions.pb.h"

namespace ddo {

// InvalidArgument naming the file and what is wrong (not JSON, a missing field, a bad dtype).
absl::StatusOr<ddo::v1::ExplainPlanRequest> ParseLayout(const std::string& text,
                                                        const std::string& path);
absl::StatusOr<ddo::v1::ExplainPlanRequest> ReadLayoutFile(const std::string& path);

}  // namespace ddo

#endif  // DDO_DAEMON_CTL_LAYOUT_FILE_H_
