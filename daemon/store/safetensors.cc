#include "daemon/store/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <limits>
#include <set>
#include <system_error>
#include <tuple>
#include <unordered_map>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "daemon/common/posix_error.h"
#include "daemon/common/status_macros.h"
#include "daemon/common/unique_fd.h"
#include "daemon/store/parallel_reader.h"
#include "nlohmann/json.hpp"

namespace ddo {
namespace {

using Json = nlohmann::json;

constexpr uint64_t kLengthPrefixBytes = 8;
constexpr uint64_t kMinHeaderBytes = 2;  // "{}"
constexpr uint64_t kMaxIndexBytes = uint64_t{100} << 20;
constexpr char kMetadataKey[] = "__metadata__";
constexpr char kSafetensorsSuffix[] = ".safetensors";
constexpr char kIndexSuffix[] = ".safetensors.index.json";

absl::Status FileError(absl::string_view path, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", what));
}

absl::Status TensorError(absl::string_view path, absl::string_view tensor, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": tensor '", tensor, "': ", what));
}

// Messages end up in gRPC trailers and protobuf strings, which want clean text: bytes quoted
// from a broken file are replaced.
std::string Printable(absl::string_view text, size_t max_size = 200) {
  std::string out;
  for (const char c : text.substr(0, max_size)) {
    const auto byte = static_cast<unsigned char>(c);
    out.push_back(byte >= 0x20 && byte < 0x7f ? c : '?');
  }
  if (text.size() > max_size) {
    out.append("...");
  }
  return out;
}

// A JSON value as it would be quoted in a message: short, ASCII.
std::string Quote(const Json& value) {
  if (value.is_structured()) {
    return absl::StrCat("a JSON ", value.type_name());
  }
  return Printable(value.dump(-1, ' ', /*ensure_ascii=*/true), 40);
}

// The exception-free parse only says "discarded". A second pass with a SAX handler that does
// nothing but note the error recovers nlohmann's position and words (error path only).
class ErrorOnlySax final : public Json::json_sax_t {
 public:
  bool null() override { return true; }
  bool boolean(bool /*value*/) override { return true; }
  bool number_integer(Json::number_integer_t /*value*/) override { return true; }
  bool number_unsigned(Json::number_unsigned_t /*value*/) override { return true; }
  bool number_float(Json::number_float_t /*value*/, const Json::string_t& /*text*/) override {
    return true;
  }
  bool string(Json::string_t& /*value*/) override { return true; }
  bool binary(Json::binary_t& /*value*/) override { return true; }
  bool start_object(std::size_t /*elements*/) override { return true; }
  bool key(Json::string_t& /*value*/) override { return true; }
  bool end_object() override { return true; }
  bool start_array(std::size_t /*elements*/) override { return true; }
  bool end_array() override { return true; }
  bool parse_error(std::size_t /*position*/, const std::string& /*last_token*/,
                   const Json::exception& error) override {
    message_ = error.what();
    return false;
  }

  const std::string& message() const { return message_; }

 private:
  std::string message_;
};

std::string DescribeJsonError(absl::string_view text) {
  ErrorOnlySax sax;
  Json::sax_parse(text.begin(), text.end(), &sax);
  absl::string_view message = sax.message();
  // Drop the "[json.exception.parse_error.101] " tag; keep "parse error at line 1, column 9: ...".
  if (const size_t tag_end = message.find("] "); tag_end != absl::string_view::npos) {
    message.remove_prefix(tag_end + 2);
  }
  return message.empty() ? std::string("syntax error") : Printable(message);
}

// A non-negative JSON integer; `what` describes the value for messages.
absl::StatusOr<uint64_t> NonNegativeInteger(const Json& value, absl::string_view what) {
  if (value.is_number_unsigned()) {
    return value.get<uint64_t>();
  }
  if (value.is_number_integer()) {
    return absl::InvalidArgumentError(absl::StrCat(what, " is negative (", Quote(value), ")"));
  }
  return absl::InvalidArgumentError(
      absl::StrCat(what, " is not a non-negative integer (", Quote(value), ")"));
}

std::string ShapeText(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

absl::StatusOr<SafetensorsTensor> ParseTensorEntry(const std::string& path, const std::string& name,
                                                   const Json& entry, uint64_t data_start,
                                                   uint64_t file_size) {
  if (!entry.is_object()) {
    return TensorError(path, name, absl::StrCat("entry is ", Quote(entry), ", not an object"));
  }
  SafetensorsTensor tensor;
  tensor.name = name;

  const auto dtype = entry.find("dtype");
  if (dtype == entry.end()) {
    return TensorError(path, name, "\"dtype\" is missing");
  }
  if (!dtype->is_string()) {
    return TensorError(path, name, absl::StrCat("\"dtype\" is ", Quote(*dtype), ", not a string"));
  }
  auto parsed_dtype = ParseSafetensorsDType(dtype->get_ref<const std::string&>());
  if (!parsed_dtype.ok()) {
    return TensorError(path, name, Printable(parsed_dtype.status().message(), 400));
  }
  tensor.dtype = *parsed_dtype;

  const auto shape = entry.find("shape");
  if (shape == entry.end()) {
    return TensorError(path, name, "\"shape\" is missing");
  }
  if (!shape->is_array()) {
    return TensorError(path, name, absl::StrCat("\"shape\" is ", Quote(*shape), ", not an array"));
  }
  for (size_t i = 0; i < shape->size(); ++i) {
    auto dim = NonNegativeInteger((*shape)[i], absl::StrCat("shape[", i, "]"));
    if (!dim.ok()) {
      return TensorError(path, name, dim.status().message());
    }
    if (*dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return TensorError(path, name, absl::StrCat("shape[", i, "] = ", *dim, " is too large"));
    }
    tensor.shape.push_back(static_cast<int64_t>(*dim));
  }

  const auto offsets = entry.find("data_offsets");
  if (offsets == entry.end()) {
    return TensorError(path, name, "\"data_offsets\" is missing");
  }
  if (!offsets->is_array() || offsets->size() != 2) {
    return TensorError(path, name,
                       absl::StrCat("\"data_offsets\" is ", Quote(*offsets), ", not [begin, end]"));
  }
  auto begin = NonNegativeInteger((*offsets)[0], "data_offsets[0]");
  if (!begin.ok()) {
    return TensorError(path, name, begin.status().message());
  }
  auto end = NonNegativeInteger((*offsets)[1], "data_offsets[1]");
  if (!end.ok()) {
    return TensorError(path, name, end.status().message());
  }
  const std::string offsets_text = absl::StrCat("data_offsets [", *begin, ", ", *end, "]");
  if (*begin > *end) {
    return TensorError(path, name, absl::StrCat(offsets_text, " end before they begin"));
  }

  auto byte_size = TensorByteSize(tensor.dtype, tensor.shape);
  if (!byte_size.ok()) {
    return TensorError(path, name, byte_size.status().message());
  }
  if (*byte_size != *end - *begin) {
    return TensorError(
        path, name,
        absl::StrCat(SafetensorsDTypeName(tensor.dtype), " ", ShapeText(tensor.shape), " needs ",
                     *byte_size, " bytes but ", offsets_text, " span ", *end - *begin));
  }
  const uint64_t data_bytes = file_size - data_start;  // the caller checked data_start
  if (*end > data_bytes) {
    return TensorError(path, name,
                       absl::StrCat(offsets_text, " run past the end of the file (", data_bytes,
                                    " bytes of data)"));
  }
  tensor.file_offset = data_start + *begin;
  tensor.byte_size = *byte_size;
  return tensor;
}

absl::Status ParseMetadata(const std::string& path, const Json& metadata,
                           std::map<std::string, std::string>* out) {
  if (!metadata.is_object()) {
    return FileError(path, absl::StrCat("\"", kMetadataKey, "\" is ", Quote(metadata),
                                        ", not an object of strings"));
  }
  for (const auto& [key, value] : metadata.items()) {
    if (!value.is_string()) {
      return FileError(path, absl::StrCat("\"", kMetadataKey, "\" entry '", key, "' is ",
                                          Quote(value), ", not a string"));
    }
    (*out)[key] = value.get<std::string>();
  }
  return absl::OkStatus();
}

// Tensors sorted by offset: a non-empty tensor must start at or after the furthest end of
// those before it. Empty tensors own no bytes and may sit anywhere.
absl::Status CheckNoOverlap(const SafetensorsFile& file) {
  uint64_t covered_end = 0;
  const SafetensorsTensor* furthest = nullptr;
  for (const SafetensorsTensor& tensor : file.tensors) {
    if (tensor.byte_size == 0) {
      continue;
    }
    if (furthest != nullptr && tensor.file_offset < covered_end) {
      return TensorError(file.path, tensor.name,
                         absl::StrCat("its data overlaps tensor '", furthest->name, "'"));
    }
    const uint64_t tensor_end = tensor.file_offset + tensor.byte_size;
    if (tensor_end > covered_end) {
      covered_end = tensor_end;
      furthest = &tensor;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<UniqueFd> OpenRegularFile(const std::string& path, uint64_t* size) {
  // O_NONBLOCK: a FIFO must not hang the daemon; it is refused just below.
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (!fd.valid()) {
    return PosixError(absl::StrCat("open ", path), errno);
  }
  struct stat info {};
  if (::fstat(fd.get(), &info) != 0) {
    return PosixError(absl::StrCat("stat ", path), errno);
  }
  if (!S_ISREG(info.st_mode)) {
    return FileError(path, "not a regular file");
  }
  *size = static_cast<uint64_t>(info.st_size);
  return fd;
}

// ---- Sets of files ---------------------------------------------------------------------

absl::Status RequireAbsolute(absl::string_view what, const std::string& path) {
  if (path.empty() || path[0] != '/') {
    return absl::InvalidArgumentError(absl::StrCat(what, " must be an absolute path, not \"",
                                                   Printable(path),
                                                   "\" (ddod's working directory is not yours)"));
  }
  return absl::OkStatus();
}

// "/a/./b//c/" -> "/a/b/c": what messages show and what a folder's entries are joined to.
std::string Normalize(const std::string& path) {
  std::string normal = std::filesystem::path(path).lexically_normal().string();
  while (normal.size() > 1 && normal.back() == '/') {
    normal.pop_back();
  }
  return normal;
}

// Identity of a file behind any symlinks and spellings of its path.
using FileId = std::pair<uint64_t, uint64_t>;

absl::StatusOr<struct stat> Stat(const std::string& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) {
    return PosixError(absl::StrCat("stat ", path), errno);
  }
  return info;
}

FileId IdOf(const struct stat& info) {
  return {static_cast<uint64_t>(info.st_dev), static_cast<uint64_t>(info.st_ino)};
}

// A folder's *.safetensors and *.safetensors.index.json (regular files or symlinks to them,
// as in the Hugging Face cache), each list sorted.
absl::Status ListFolder(const std::string& folder, std::vector<std::string>* shards,
                        std::vector<std::string>* indexes) {
  std::error_code error;
  std::filesystem::directory_iterator it(folder, error);
  for (; !error && it != std::filesystem::directory_iterator(); it.increment(error)) {
    const std::string name = it->path().filename().string();
    std::error_code type_error;
    if (name.empty() || name[0] == '.' ||
        !std::filesystem::is_regular_file(it->path(), type_error)) {
      continue;
    }
    if (absl::EndsWith(name, kSafetensorsSuffix)) {
      shards->push_back(absl::StrCat(folder, "/", name));
    } else if (absl::EndsWith(name, kIndexSuffix)) {
      indexes->push_back(absl::StrCat(folder, "/", name));
    }
  }
  if (error) {
    return PosixError(absl::StrCat("list ", folder), error.value());
  }
  std::sort(shards->begin(), shards->end());
  std::sort(indexes->begin(), indexes->end());
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadIndexText(const std::string& path) {
  uint64_t size = 0;
  DDO_ASSIGN_OR_RETURN(UniqueFd fd, OpenRegularFile(path, &size));
  if (size > kMaxIndexBytes) {
    return FileError(path, absl::StrCat("index is ", size, " bytes, over the ",
                                        kMaxIndexBytes >> 20, " MiB limit"));
  }
  std::string text(size, '\0');
  DDO_RETURN_IF_ERROR(ReadFully(fd.get(), 0, text.data(), size, path));
  return text;
}

// `owner` maps every tensor name to the index of the file that holds it.
absl::Status ValidateIndex(const std::string& index_path, const std::vector<SafetensorsFile>& files,
                           const std::map<FileId, size_t>& file_by_id,
                           const std::unordered_map<std::string, size_t>& owner) {
  DDO_ASSIGN_OR_RETURN(const std::string text, ReadIndexText(index_path));
  const Json index = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (index.is_discarded()) {
    return FileError(index_path,
                     absl::StrCat("index is not valid JSON: ", DescribeJsonError(text)));
  }
  if (!index.is_object()) {
    return FileError(index_path, absl::StrCat("index is ", Quote(index), ", not an object"));
  }
  const auto weight_map = index.find("weight_map");
  if (weight_map == index.end() || !weight_map->is_object()) {
    return FileError(index_path, "index has no \"weight_map\" object");
  }

  const std::string index_folder = std::filesystem::path(index_path).parent_path().string();
  std::map<std::string, size_t> file_by_shard_name;
  std::set<size_t> listed_files;
  for (const auto& [tensor, shard_value] : weight_map->items()) {
    if (!shard_value.is_string()) {
      return FileError(index_path, absl::StrCat("weight_map entry '", tensor, "' is ",
                                                Quote(shard_value), ", not a shard file name"));
    }
    const std::string& shard = shard_value.get_ref<const std::string&>();
    auto known = file_by_shard_name.find(shard);
    if (known == file_by_shard_name.end()) {
      auto info = Stat(absl::StrCat(index_folder, "/", shard));
      const auto file = info.ok() ? file_by_id.find(IdOf(*info)) : file_by_id.end();
      if (shard.empty() || file == file_by_id.end()) {
        return FileError(index_path, absl::StrCat("weight_map lists shard '", Printable(shard),
                                                  "', which is not among the files being loaded"));
      }
      known = file_by_shard_name.emplace(shard, file->second).first;
    }
    const size_t shard_file = known->second;
    listed_files.insert(shard_file);
    const auto holder = owner.find(tensor);
    if (holder == owner.end()) {
      return FileError(index_path, absl::StrCat("weight_map lists tensor '", tensor, "' in shard '",
                                                shard, "', but no file being loaded holds it"));
    }
    if (holder->second != shard_file) {
      return FileError(index_path,
                       absl::StrCat("weight_map puts tensor '", tensor, "' in shard '", shard,
                                    "', but it is in ", files[holder->second].path));
    }
  }
  for (size_t i = 0; i < files.size(); ++i) {
    if (listed_files.count(i) == 0) {
      return FileError(index_path, absl::StrCat("weight_map does not list shard ", files[i].path,
                                                ", which is being loaded"));
    }
  }
  for (const SafetensorsFile& file : files) {
    for (const SafetensorsTensor& tensor : file.tensors) {
      if (!weight_map->contains(tensor.name)) {
        return FileError(
            index_path, absl::StrCat("weight_map lacks tensor '", tensor.name, "' of ", file.path));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<SafetensorsFile> ParseSafetensorsHeader(const std::string& path,
                                                       absl::string_view header_json,
                                                       uint64_t file_size) {
  SafetensorsFile file;
  file.path = path;
  file.file_size = file_size;
  file.data_start = kLengthPrefixBytes + header_json.size();
  if (file.data_start > file_size) {
    return FileError(path,
                     absl::StrCat("header (", header_json.size(),
                                  " bytes) runs past the end of the file (", file_size, " bytes)"));
  }

  // JSON objects may repeat a key and nlohmann keeps the last: notice repeated tensor names.
  std::set<std::string> names;
  std::string repeated_name;
  const Json::parser_callback_t note_repeats = [&](int depth, Json::parse_event_t event,
                                                   Json& parsed) {
    if (depth == 1 && event == Json::parse_event_t::key && repeated_name.empty() &&
        !names.insert(parsed.get<std::string>()).second) {
      repeated_name = parsed.get<std::string>();
    }
    return true;
  };
  const Json header = Json::parse(header_json.begin(), header_json.end(), note_repeats,
                                  /*allow_exceptions=*/false);
  if (header.is_discarded()) {
    return FileError(path,
                     absl::StrCat("header is not valid JSON: ", DescribeJsonError(header_json)));
  }
  if (!header.is_object()) {
    return FileError(path, absl::StrCat("header is ", Quote(header), ", not a JSON object"));
  }
  if (!repeated_name.empty()) {
    return TensorError(path, repeated_name, "the header lists this name more than once");
  }

  file.tensors.reserve(header.size());
  for (const auto& [name, entry] : header.items()) {
    if (name == kMetadataKey) {
      DDO_RETURN_IF_ERROR(ParseMetadata(path, entry, &file.metadata));
      continue;
    }
    if (name.empty()) {
      return FileError(path, "a tensor has an empty name");
    }
    DDO_ASSIGN_OR_RETURN(SafetensorsTensor tensor,
                         ParseTensorEntry(path, name, entry, file.data_start, file_size));
    file.tensors.push_back(std::move(tensor));
  }
  std::sort(file.tensors.begin(), file.tensors.end(),
            [](const SafetensorsTensor& a, const SafetensorsTensor& b) {
              return std::tie(a.file_offset, a.byte_size, a.name) <
                     std::tie(b.file_offset, b.byte_size, b.name);
            });
  DDO_RETURN_IF_ERROR(CheckNoOverlap(file));
  return file;
}

absl::StatusOr<SafetensorsFile> ReadSafetensorsFile(const std::string& path) {
  uint64_t file_size = 0;
  DDO_ASSIGN_OR_RETURN(UniqueFd fd, OpenRegularFile(path, &file_size));
  if (file_size < kLengthPrefixBytes + kMinHeaderBytes) {
    return FileError(
        path, absl::StrCat("file is ", file_size, " bytes, too short for a safetensors header"));
  }
  unsigned char prefix[kLengthPrefixBytes] = {};
  DDO_RETURN_IF_ERROR(
      ReadFully(fd.get(), 0, reinterpret_cast<char*>(prefix), sizeof(prefix), path));
  uint64_t header_bytes = 0;
  for (size_t i = 0; i < kLengthPrefixBytes; ++i) {
    header_bytes |= uint64_t{prefix[i]} << (8 * i);  // little-endian on every host
  }
  if (header_bytes < kMinHeaderBytes) {
    return FileError(path, absl::StrCat("header length ", header_bytes,
                                        " is too small (not a safetensors file?)"));
  }
  if (header_bytes > kMaxSafetensorsHeaderBytes) {
    return FileError(path, absl::StrCat("header length ", header_bytes, " is over the ",
                                        kMaxSafetensorsHeaderBytes >> 20,
                                        " MiB limit (not a safetensors file?)"));
  }
  if (header_bytes > file_size - kLengthPrefixBytes) {
    return FileError(path, absl::StrCat("header length ", header_bytes,
                                        " runs past the end of the file (", file_size, " bytes)"));
  }
  std::string header(header_bytes, '\0');
  DDO_RETURN_IF_ERROR(ReadFully(fd.get(), kLengthPrefixBytes, header.data(), header_bytes, path));
  return ParseSafetensorsHeader(path, header, file_size);
}

absl::StatusOr<SafetensorsSet> OpenSafetensorsSet(const std::vector<std::string>& inputs,
                                                  const std::string& index_file) {
  if (inputs.empty()) {
    return absl::InvalidArgumentError("no safetensors files or folders given");
  }
  if (!index_file.empty()) {
    DDO_RETURN_IF_ERROR(RequireAbsolute("index_file", index_file));
  }

  std::vector<std::string> paths;
  std::vector<std::string> folder_indexes;
  for (const std::string& input : inputs) {
    DDO_RETURN_IF_ERROR(RequireAbsolute("a safetensors file or folder", input));
    const std::string path = Normalize(input);
    DDO_ASSIGN_OR_RETURN(const struct stat info, Stat(path));
    if (S_ISDIR(info.st_mode)) {
      std::vector<std::string> shards;
      std::vector<std::string> indexes;
      DDO_RETURN_IF_ERROR(ListFolder(path, &shards, &indexes));
      if (shards.empty()) {
        return FileError(path, "the folder holds no *.safetensors file");
      }
      paths.insert(paths.end(), shards.begin(), shards.end());
      if (indexes.size() == 1) {
        folder_indexes.push_back(indexes.front());
      }
    } else if (S_ISREG(info.st_mode)) {
      paths.push_back(path);
    } else {
      return FileError(path, "neither a regular file nor a folder");
    }
  }

  SafetensorsSet set;
  std::map<FileId, size_t> file_by_id;
  std::unordered_map<std::string, size_t> owner;  // tensor name -> index in set.files
  for (const std::string& path : paths) {
    DDO_ASSIGN_OR_RETURN(const struct stat info, Stat(path));
    if (!file_by_id.emplace(IdOf(info), set.files.size()).second) {
      continue;  // reached twice (a folder and a file in it, or a symlink)
    }
    DDO_ASSIGN_OR_RETURN(SafetensorsFile file, ReadSafetensorsFile(path));
    for (const SafetensorsTensor& tensor : file.tensors) {
      const auto [it, inserted] = owner.emplace(tensor.name, set.files.size());
      if (!inserted) {
        return absl::InvalidArgumentError(absl::StrCat("tensor '", tensor.name, "' is in both ",
                                                       set.files[it->second].path, " and ",
                                                       file.path));
      }
      set.total_bytes += tensor.byte_size;
    }
    set.files.push_back(std::move(file));
  }

  if (!index_file.empty()) {
    set.index_path = Normalize(index_file);
  } else {
    std::sort(folder_indexes.begin(), folder_indexes.end());
    folder_indexes.erase(std::unique(folder_indexes.begin(), folder_indexes.end()),
                         folder_indexes.end());
    if (folder_indexes.size() > 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("several index files apply (", absl::StrJoin(folder_indexes, ", "),
                       "): load one folder at a time or name index_file"));
    }
    if (folder_indexes.size() == 1) {
      set.index_path = folder_indexes.front();
    }
  }
  if (!set.index_path.empty()) {
    DDO_RETURN_IF_ERROR(ValidateIndex(set.index_path, set.files, file_by_id, owner));
  }
  return set;
}

}  // namespace ddo
