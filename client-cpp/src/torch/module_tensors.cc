// File: client-cpp/src/torch/module_tensors.cc
#include "client-cpp/src/torch/module_tensors.h"

#include <set>
#include <sstream>
#include <unordered_map>
#include <utility>

#include <torch/csrc/autograd/grad_mode.h>

#include "client-cpp/src/torch/dtypes.h"

namespace ddo::detail {
namespace {

// Walks the tree by hand: named_modules() needs a root owned by a shared_ptr, and a runner
// may hand us a module it holds by value.
void Collect(torch::nn::Module& owner, const std::string& path,
             std::vector<ModuleTensor>& found) {
  const std::string prefix = path.empty() ? "" : path + ".";
  for (const auto& item : owner.named_parameters(/*recurse=*/false)) {
    if (!item.value().defined()) continue;
    found.push_back({prefix + item.key(), path, &owner, item.key(), item.value(), false});
  }
  for (const auto& item : owner.named_buffers(/*recurse=*/false)) {
    if (!item.value().defined()) continue;
    found.push_back({prefix + item.key(), path, &owner, item.key(), item.value(), true});
  }
  for (const auto& child : owner.named_children()) {
    Collect(*child.value(), prefix + child.key(), found);
  }
}

std::string Describe(c10::ScalarType type, c10::IntArrayRef shape) {
  std::ostringstream text;
  text << TypeName(type) << " [";
  for (size_t i = 0; i < shape.size(); ++i) text << (i ? ", " : "") << shape[i];
  text << "]";
  return text.str();
}

}  // namespace

std::vector<ModuleTensor> ModuleTensors(torch::nn::Module& root) {
  std::vector<ModuleTensor> found;
  Collect(root, "", found);
  return found;
}

std::vector<std::vector<ModuleTensor>> AliasGroups(const std::vector<ModuleTensor>& entries) {
  std::vector<std::vector<ModuleTensor>> groups;
  std::unordered_map<const c10::TensorImpl*, size_t> index_of;
  for (const ModuleTensor& entry : entries) {
    const c10::TensorImpl* impl = entry.tensor.unsafeGetTensorImpl();
    auto [where, added] = index_of.emplace(impl, groups.size());
    if (added) groups.emplace_back();
    groups[where->second].push_back(entry);
  }
  return groups;
}

ModuleMatch MatchModule(torch::nn::Module& root,
                        const std::map<std::string, DeclaredTensor>& component) {
  ModuleMatch match;
  std::set<std::string> known;
  for (std::vector<ModuleTensor>& group : AliasGroups(ModuleTensors(root))) {
    const std::string* source = nullptr;
    for (const ModuleTensor& entry : group) {
      known.insert(entry.name);
      if (source == nullptr && component.count(entry.name) != 0) source = &entry.name;
    }
    if (source == nullptr) {
      for (const ModuleTensor& entry : group) match.missing.push_back(entry.name);
      continue;
    }
    const DeclaredTensor& declared = component.at(*source);
    const torch::Tensor& current = group.front().tensor;
    if (declared.type != current.scalar_type() ||
        c10::IntArrayRef(declared.shape) != current.sizes()) {
      match.mismatched.push_back(*source + ": component " +
                                 Describe(declared.type, declared.shape) + ", module " +
                                 Describe(current.scalar_type(), current.sizes()));
      continue;
    }
    std::string name = *source;
    match.groups.emplace_back(std::move(name), std::move(group));
  }
  for (const auto& [name, declared] : component) {
    if (known.count(name) == 0) match.unexpected.push_back(name);
  }
  return match;
}

std::string DescribeNames(const std::vector<std::string>& names) {
  constexpr size_t kLimit = 20;
  if (names.empty()) return "none";
  std::string shown;
  for (size_t i = 0; i < names.size() && i < kLimit; ++i) {
    shown += (i ? ", '" : "'") + names[i] + "'";
  }
  if (names.size() > kLimit) {
    shown += ", ... (" + std::to_string(names.size() - kLimit) + " more)";
  }
  return shown;
}

void Rebind(const std::vector<ModuleTensor>& group, const torch::Tensor& view) {
  torch::NoGradGuard no_grad;
  for (const ModuleTensor& entry : group) {
    torch::Tensor tensor = entry.tensor;  // shares the TensorImpl the module holds
    const bool requires_grad = tensor.requires_grad();
    tensor.set_data(view);
    if (tensor.requires_grad() != requires_grad) tensor.set_requires_grad(requires_grad);
  }
}

}  // namespace ddo::detail
