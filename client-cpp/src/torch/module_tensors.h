// File: client-cpp/src/torch/module_tensors.h
//
// The tensors of a libtorch module as ddod stores them: every parameter and buffer under its
// dotted name ("blocks.0.attn.q.weight"), as torch::nn::Module::named_parameters() names them.
// A tensor registered under several names (tied weights) is one component entry, stored by its
// first name: AliasGroups keeps the names together.
//
// Thread-safety: the functions read (Rebind: write) a module that the caller holds alone: no
// other thread may run or change the module meanwhile.
#ifndef DDO_CLIENT_TORCH_MODULE_TENSORS_H_
#define DDO_CLIENT_TORCH_MODULE_TENSORS_H_

#include <map>
#include <string>
#include <vector>

#include <torch/nn/module.h>
#include <torch/types.h>

namespace ddo::detail {

struct ModuleTensor {
  std::string name;         // "blocks.0.attn.q.weight"
  std::string module_path;  // "blocks.0.attn.q" ("" for the root)
  torch::nn::Module* owner = nullptr;
  std::string attribute;  // "weight"
  torch::Tensor tensor;
  bool is_buffer = false;
};

// Every defined parameter and buffer of `root` and its descendants, depth first in
// registration order (named_parameters() order, then buffers per module).
std::vector<ModuleTensor> ModuleTensors(torch::nn::Module& root);

// The entries grouped by the tensor they name (the same TensorImpl), each group in the order
// of its first appearance; the first name of a group is the component's name for it.
std::vector<std::vector<ModuleTensor>> AliasGroups(const std::vector<ModuleTensor>& entries);

// What a component's table declares of one tensor.
struct DeclaredTensor {
  c10::ScalarType type;
  std::vector<int64_t> shape;
};

// The module's tensors matched by name to a component's table.
struct ModuleMatch {
  // (component name, every module name of that tensor) for each matched tensor.
  std::vector<std::pair<std::string, std::vector<ModuleTensor>>> groups;
  std::vector<std::string> missing;     // in the module, not in the component
  std::vector<std::string> unexpected;  // in the component, not in the module
  std::vector<std::string> mismatched;  // "name: component bfloat16 [4, 8], module float [4, 8]"
  bool ok() const { return missing.empty() && unexpected.empty() && mismatched.empty(); }
};

// Matches by the group's first name; a group whose first name the component lacks may match by
// another of its names (a component stored from another module of the tie).
ModuleMatch MatchModule(torch::nn::Module& root,
                        const std::map<std::string, DeclaredTensor>& component);

// "'a', 'b', ... (3 more)": at most 20 names, quoted; "none" for none (Python's
// describe_names, so both clients' messages read the same).
std::string DescribeNames(const std::vector<std::string>& names);

// Points every name of a group at `view` (torch's set_data: the parameter object stays, so a
// module holding it as a member, like Linear's `weight`, sees the new data), keeping each
// tensor's requires_grad.
void Rebind(const std::vector<ModuleTensor>& group, const torch::Tensor& view);

}  // namespace ddo::detail

#endif  // DDO_CLIENT_TORCH_MODULE_TENSORS_H_
