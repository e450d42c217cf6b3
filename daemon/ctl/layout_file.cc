// File: daemon/ctl/layout_file.cc
#include "daemon/ctl/layout_file.h"

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "daemon/service/tensor_proto.h"
#include "daemon/layout/dtype.h"

namespace ddo {

absl::StatusOr<ddo::v1::ExplainPlanRequest> ParseLayout(const std::string& text,
                                                        const std::string& path) {
  auto bad = [&path](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", what));
  };
  nlohmann::json json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.is_object()) return bad("not a JSON object");
  ddo::v1::ExplainPlanRequest request;
  if (json.contains("component")) {
    if (!json["component"].is_string()) return bad("\"component\" must be a string");
    request.set_component(json["component"].get<std::string>());
  }
  if (json.contains("device")) {
    if (!json["device"].is_string()) return bad("\"device\" must be a string");
    request.set_device_uuid(json["device"].get<std::string>());
  }
  if (json.contains("settings")) {
    if (!json["settings"].is_object()) return bad("\"settings\" must be an object");
    for (const auto& [name, value] : json["settings"].items()) {
      if (!value.is_string()) return bad(absl::StrCat("settings.", name, " must be a string"));
      (*request.mutable_settings())[name] = value.get<std::string>();
    }
  }
  if (!json.contains("tensors") || !json["tensors"].is_array()) {
    return bad("\"tensors\" must be an array of tensors");
  }
  size_t index = 0;
  for (const auto& tensor : json["tensors"]) {
    const std::string where = absl::StrCat("tensors[", index++, "]");
    if (!tensor.is_object() || !tensor.contains("name") || !tensor["name"].is_string()) {
      return bad(absl::StrCat(where, " needs a \"name\""));
    }
    const std::string name = tensor["name"].get<std::string>();
    if (!tensor.contains("dtype") || !tensor["dtype"].is_string()) {
      return bad(absl::StrCat(where, " (", name, ") needs a \"dtype\""));
    }
    absl::StatusOr<DType> dtype = ParseSafetensorsDType(tensor["dtype"].get<std::string>());
    if (!dtype.ok()) return bad(absl::StrCat(name, ": ", dtype.status().message()));
    if (!tensor.contains("shape") || !tensor["shape"].is_array()) {
      return bad(absl::StrCat(where, " (", name, ") needs a \"shape\" array"));
    }
    ddo::v1::TensorSpec* spec = request.add_tensors();
    spec->set_name(name);
    spec->set_dtype(ToProto(*dtype));
    std::vector<int64_t> shape;
    for (const auto& dimension : tensor["shape"]) {
      if (!dimension.is_number_integer()) return bad(absl::StrCat(name, ": shape holds a non-integer"));
      shape.push_back(dimension.get<int64_t>());
      spec->add_shape(shape.back());
    }
    absl::StatusOr<uint64_t> bytes = TensorByteSize(*dtype, shape);
    if (!bytes.ok()) return bad(absl::StrCat(name, ": ", bytes.status().message()));
    spec->set_byte_size(*bytes);
    if (tensor.contains("module_path") && tensor["module_path"].is_string()) {
      spec->set_module_path(tensor["module_path"].get<std::string>());
    }
    if (tensor.contains("module_class") && tensor["module_class"].is_string()) {
      spec->set_module_class(tensor["module_class"].get<std::string>());
    }
    spec->set_unit(static_cast<uint32_t>(index - 1));
  }
  return request;
}

absl::StatusOr<ddo::v1::ExplainPlanRequest> ReadLayoutFile(const std::string& path) {
  std::ifstream file(path);
  if (!file) return absl::NotFoundError(absl::StrCat("cannot read the layout file ", path));
  std::stringstream text;
  text << file.rdbuf();
  return ParseLayout(text.str(), path);
}

}  // namespace ddo
