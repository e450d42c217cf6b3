#include "daemon/store/manifest.h"

#include <fcntl.h>
#include <unistd.h>
#include <xxhash.h>

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "daemon/common/status_macros.h"
#include "daemon/common/runtime_dir.h"
#include "ddo/wire/unique_fd.h"
#include "nlohmann/json.hpp"

namespace ddo {
namespace {

using nlohmann::json;

constexpr char kFormat[] = "ddo-pool-manifest";
constexpr int kVersion = 1;

std::string Checksum(const json& components) {
  const std::string text = components.dump();
  return absl::StrFormat("xxh3-64:%016x", XXH3_64bits(text.data(), text.size()));
}

json TensorToJson(const TensorEntry& tensor) {
  return json{{"name", tensor.name},
              {"dtype", SafetensorsDTypeName(tensor.dtype)},
              {"shape", tensor.shape},
              {"byte_size", tensor.byte_size},
              {"module_path", tensor.module_path},
              {"module_class", tensor.module_class},
              {"unit", tensor.unit},
              {"is_buffer", tensor.is_buffer},
              {"offset", tensor.offset},
              {"segment", tensor.segment}};
}

absl::StatusOr<TensorEntry> TensorFromJson(const json& value) {
  TensorEntry tensor;
  try {
    tensor.name = value.at("name").get<std::string>();
    auto dtype = ParseSafetensorsDType(value.at("dtype").get<std::string>());
    if (!dtype.ok()) return dtype.status();
    tensor.dtype = *dtype;
    tensor.shape = value.at("shape").get<std::vector<int64_t>>();
    tensor.byte_size = value.at("byte_size").get<uint64_t>();
    tensor.module_path = value.at("module_path").get<std::string>();
    tensor.module_class = value.at("module_class").get<std::string>();
    tensor.unit = value.at("unit").get<uint32_t>();
    tensor.is_buffer = value.at("is_buffer").get<bool>();
    tensor.offset = value.at("offset").get<uint64_t>();
    tensor.segment = value.contains("segment") ? value.at("segment").get<uint32_t>() : 0;
  } catch (const json::exception& error) {
    return absl::DataLossError(absl::StrCat("bad tensor entry: ", error.what()));
  }
  return tensor;
}

// fsync of the directory makes the rename itself durable.
absl::Status SyncDirectory(FileSystem& fs, const std::string& directory) {
  DDO_ASSIGN_OR_RETURN(UniqueFd fd, fs.Open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0));
  return fs.Sync(fd.get(), directory);
}

// Writes `text` to `temporary`, makes it durable and renames it over `path`.
absl::Status ReplaceFile(FileSystem& fs, const std::string& temporary, const std::string& path,
                         const std::string& text) {
  DDO_ASSIGN_OR_RETURN(UniqueFd fd,
                       fs.Open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  DDO_RETURN_IF_ERROR(fs.Write(fd.get(), text.data(), text.size(), temporary));
  DDO_RETURN_IF_ERROR(fs.Sync(fd.get(), temporary));
  fd.Reset();
  return fs.Rename(temporary, path);
}

}  // namespace

absl::Status WriteManifest(const std::string& path,
                           const std::vector<ManifestComponent>& components, FileSystem* fs) {
  if (fs == nullptr) fs = FileSystem::Default();
  json list = json::array();
  for (const ManifestComponent& component : components) {
    json tensors = json::array();
    for (const TensorEntry& tensor : component.tensors) tensors.push_back(TensorToJson(tensor));
    json sources = json::array();
    for (const FileIdentity& file : component.sources) {
      sources.push_back(json::array(
          {file.device, file.inode, file.size, file.modified_ns, file.changed_ns}));
    }
    json segments = json::array();
    for (const ManifestSegment& segment : component.segments) {
      segments.push_back(json{{"name", segment.name}, {"size", segment.size}});
    }
    json entry{{"cache_key", component.cache_key},
               {"owner_uid", component.owner_uid},
               {"client_written", component.client_written},
               {"sources", std::move(sources)},
               {"component_id", component.component_id},
               {"structure_hash", component.structure_hash},
               {"content_hash", component.content_hash},
               {"segments", std::move(segments)},
               {"tensors", std::move(tensors)}};
    if (component.keep_alive_seconds != 0) entry["keep_alive_s"] = component.keep_alive_seconds;
    if (component.base_cache_key.empty() && !component.segments.empty()) {
      // Also as a ddod from before derived versions reads it. A derived version has no
      // "segment_name": such a ddod refuses the manifest rather than serve it from one segment.
      entry["segment_name"] = component.segments.front().name;
      entry["segment_size"] = component.segments.front().size;
    } else {
      entry["base_cache_key"] = component.base_cache_key;
      entry["base_component_id"] = component.base_component_id;
    }
    list.push_back(std::move(entry));
  }
  const json document{{"format", kFormat},
                      {"version", kVersion},
                      {"checksum", Checksum(list)},
                      {"components", list}};
  const std::string text = document.dump(1);

  const std::string temporary = path + ".tmp";
  if (absl::Status replaced = ReplaceFile(*fs, temporary, path, text); !replaced.ok()) {
    // The previous manifest stays as it was; a half-written temporary must not stay beside it.
    (void)fs->Unlink(temporary);
    return replaced;
  }
  return SyncDirectory(*fs, ParentDirectory(path));
}

absl::StatusOr<std::vector<ManifestComponent>> ReadManifest(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    return absl::NotFoundError(absl::StrCat("no manifest at ", path));
  }
  std::ostringstream text;
  text << in.rdbuf();
  const json document = json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (document.is_discarded() || !document.is_object()) {
    return absl::DataLossError(absl::StrCat(path, " is not valid JSON"));
  }
  const auto format = document.find("format");
  const auto version = document.find("version");
  if (format == document.end() || *format != kFormat || version == document.end() ||
      *version != kVersion) {
    return absl::DataLossError(absl::StrCat(path, " is not a version ", kVersion, " ", kFormat));
  }
  const auto components = document.find("components");
  const auto checksum = document.find("checksum");
  if (components == document.end() || !components->is_array() || checksum == document.end() ||
      !checksum->is_string()) {
    return absl::DataLossError(absl::StrCat(path, " has no component list or checksum"));
  }
  if (Checksum(*components) != checksum->get<std::string>()) {
    return absl::DataLossError(absl::StrCat(path, ": checksum mismatch (torn or edited file)"));
  }
  std::vector<ManifestComponent> result;
  for (const json& entry : *components) {
    ManifestComponent component;
    try {
      component.cache_key = entry.at("cache_key").get<std::string>();
      component.component_id = entry.at("component_id").get<std::string>();
      component.structure_hash = entry.at("structure_hash").get<std::string>();
      component.content_hash = entry.at("content_hash").get<std::string>();
      if (entry.contains("segments")) {
        for (const json& segment : entry.at("segments")) {
          component.segments.push_back(
              {segment.at("name").get<std::string>(), segment.at("size").get<uint64_t>()});
        }
      } else {
        component.segments.push_back({entry.at("segment_name").get<std::string>(),
                                      entry.at("segment_size").get<uint64_t>()});
      }
      if (entry.contains("base_cache_key")) {
        component.base_cache_key = entry.at("base_cache_key").get<std::string>();
        component.base_component_id = entry.at("base_component_id").get<std::string>();
      }
      component.owner_uid = entry.contains("owner_uid") ? entry.at("owner_uid").get<uid_t>()
                                                         : ::geteuid();
      if (entry.contains("keep_alive_s")) {
        component.keep_alive_seconds = entry.at("keep_alive_s").get<int64_t>();
        if (component.keep_alive_seconds < -1) {
          return absl::DataLossError(absl::StrCat(path, ": keep_alive_s ",
                                                  component.keep_alive_seconds, " is below -1"));
        }
      }
      component.client_written =
          entry.contains("client_written") && entry.at("client_written").get<bool>();
      if (entry.contains("readers")) {
        component.readers = entry.at("readers").get<std::vector<uid_t>>();
      }
      if (entry.contains("sources")) {
        for (const json& file : entry.at("sources")) {
          component.sources.push_back({file.at(0).get<uint64_t>(), file.at(1).get<uint64_t>(),
                                       file.at(2).get<uint64_t>(), file.at(3).get<int64_t>(),
                                       file.at(4).get<int64_t>()});
        }
      }
      for (const json& tensor : entry.at("tensors")) {
        DDO_ASSIGN_OR_RETURN(TensorEntry parsed, TensorFromJson(tensor));
        component.tensors.push_back(std::move(parsed));
      }
    } catch (const json::exception& error) {
      return absl::DataLossError(absl::StrCat(path, ": bad component entry: ", error.what()));
    }
    result.push_back(std::move(component));
  }
  return result;
}

}  // namespace ddo
