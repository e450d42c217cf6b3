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
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "daemon/common/status_macros.h"
#include "daemon/store/parallel_reader.h"
#include "ddo/wire/posix_error.h"
#include "nlohmann/json.hpp"

namespace ddo {
namespace {

using Json = nlohmann::json;

constexpr uint64_t kLengthPrefixBytes = 8;
constexpr uint64_t kMinHeaderBytes = 2;       // "{}"
constexpr uint64_t kCancelCheckEvery = 4096;  // entries between two looks at `cancelled`
// One entry's value is built as a small Json; these bound it (real ones hold about ten values
// two levels deep; __metadata__ may hold a few hundred strings).
constexpr size_t kMaxValuesPerEntry = size_t{1} << 16;
constexpr size_t kMaxEntryDepth = 32;
constexpr size_t kMaxShownName = 128;  // bytes of a tensor name or key shown in a message
constexpr size_t kMaxShownDType = 32;
constexpr size_t kMaxShownPath = 1024;  // bytes of a source's name shown in a message
constexpr char kMetadataKey[] = "__metadata__";
constexpr char kWeightMapKey[] = "weight_map";
constexpr char kSafetensorsSuffix[] = ".safetensors";
constexpr char kIndexSuffix[] = ".safetensors.index.json";

// Text from a file or a client, as a message may show it: C-escaped, at most `max_size`
// bytes of it.
std::string Shown(absl::string_view text, size_t max_size = kMaxShownName) {
  std::string out = absl::CHexEscape(text.substr(0, max_size));
  if (text.size() > max_size) {
    out.append("...");
  }
  return out;
}

std::string ShownName(absl::string_view source_name) { return Shown(source_name, kMaxShownPath); }

absl::Status FileError(absl::string_view source_name, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(ShownName(source_name), ": ", what));
}

absl::Status TensorError(absl::string_view source_name, absl::string_view tensor,
                         absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat(ShownName(source_name), ": tensor '", Shown(tensor), "': ", what));
}

absl::Status CancelledWhile(absl::string_view what) {
  return absl::CancelledError(absl::StrCat("cancelled while ", what));
}

bool Cancelled(const CancelledFn& cancelled) { return cancelled && cancelled(); }

// What a JSON value is, for messages (never its text).
const char* KindOf(const Json& value) {
  switch (value.type()) {
    case Json::value_t::null:
      return "null";
    case Json::value_t::boolean:
      return "a boolean";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
    case Json::value_t::number_float:
      return "a number";
    case Json::value_t::string:
      return "a string";
    case Json::value_t::array:
      return "an array";
    case Json::value_t::object:
      return "an object";
    default:
      return "not JSON";
  }
}

// ---- Streaming the members of one JSON object ---------------------------------------------
//
// nlohmann's DOM parse with a callback (what this file used to do to notice repeated names)
// scans the whole parent object for discarded values each time a child object ends, which is
// quadratic in the number of entries. This SAX handler instead hands each member of one object
// to `visit` as soon as its value is complete, building only that value; everything else is
// checked for syntax and dropped. Time is linear in the text; memory is one member's value.
class MemberStream final : public Json::json_sax_t {
 public:
  using Visit = std::function<absl::Status(std::string key, Json value)>;

  struct Options {
    std::string source_name;    // for messages
    std::string what;           // "header" or "index", for messages
    std::string container_key;  // "": the members of the top-level object; otherwise the
                                // members of the object under this top-level key
    uint64_t max_members = 0;
    std::string too_many;  // message when there are more than max_members
    const CancelledFn* cancelled = nullptr;
  };

  MemberStream(Options options, Visit visit)
      : options_(std::move(options)), visit_(std::move(visit)) {}

  // Parses `text`. Errors, in this order: a stop (a cap, a bound, cancellation), bad JSON,
  // a top-level value that is not an object, then the first error `visit` returned.
  absl::Status Run(absl::string_view text) {
    Json::sax_parse(text.begin(), text.end(), this);
    if (!stop_.ok()) {
      return stop_;
    }
    if (syntax_error_at_.has_value()) {
      return FileError(options_.source_name,
                       absl::StrCat(options_.what, " is not valid JSON (syntax error near byte ",
                                    *syntax_error_at_, ")"));
    }
    if (top_kind_ != nullptr && !top_is_object_) {
      return FileError(options_.source_name,
                       absl::StrCat(options_.what, " is ", top_kind_, ", not a JSON object"));
    }
    return first_visit_error_;
  }

  // With a container_key: whether the top-level object had it, as an object.
  bool container_is_object() const { return container_is_object_; }

  // json_sax_t.
  bool null() override { return Scalar(Json(nullptr)); }
  bool boolean(bool value) override { return Scalar(Json(value)); }
  bool number_integer(Json::number_integer_t value) override { return Scalar(Json(value)); }
  bool number_unsigned(Json::number_unsigned_t value) override { return Scalar(Json(value)); }
  bool number_float(Json::number_float_t value, const Json::string_t& /*text*/) override {
    return Scalar(Json(value));
  }
  bool string(Json::string_t& value) override { return Scalar(Json(std::move(value))); }
  bool binary(Json::binary_t& /*value*/) override { return Scalar(Json()); }  // not in JSON text
  bool start_object(std::size_t /*elements*/) override { return Open(Json::object()); }
  bool start_array(std::size_t /*elements*/) override { return Open(Json::array()); }
  bool end_object() override { return Close(); }
  bool end_array() override { return Close(); }
  bool key(Json::string_t& value) override { return Key(value); }
  bool parse_error(std::size_t position, const std::string& /*last_token*/,
                   const Json::exception& /*error*/) override {
    // nlohmann's message quotes the bytes it choked on: only the position is kept.
    syntax_error_at_ = position;
    return false;
  }

 private:
  // What the innermost open container is to us.
  enum class Role {
    kMembers,   // the object whose members are streamed
    kOuter,     // the top-level object, when the members are under container_key
    kBuilding,  // inside a member's value
    kSkip,      // anything else
  };

  bool Stop(absl::Status status) {
    stop_ = std::move(status);
    return false;
  }

  bool Scalar(Json value) {
    if (roles_.empty()) {
      top_kind_ = KindOf(value);
      return true;
    }
    switch (roles_.back()) {
      case Role::kMembers:
        return Member(std::move(value));
      case Role::kBuilding:
        return Add(std::move(value)) != nullptr;
      case Role::kOuter:
        NoteContainer(value);
        return stop_.ok();
      case Role::kSkip:
        return true;
    }
    return true;
  }

  bool Open(Json empty) {
    if (roles_.empty()) {
      top_kind_ = KindOf(empty);
      top_is_object_ = empty.is_object();
      const Role role = !empty.is_object()               ? Role::kSkip
                        : options_.container_key.empty() ? Role::kMembers
                                                         : Role::kOuter;
      roles_.push_back(role);
      return true;
    }
    switch (roles_.back()) {
      case Role::kMembers:
        member_ = std::move(empty);
        building_ = {&member_};
        member_values_ = 1;
        roles_.push_back(Role::kBuilding);
        return true;
      case Role::kBuilding: {
        if (building_.size() >= kMaxEntryDepth) {
          return Stop(FileError(options_.source_name,
                                absl::StrCat("entry '", Shown(key_), "' is nested more than ",
                                             kMaxEntryDepth, " levels deep")));
        }
        Json* added = Add(std::move(empty));
        if (added == nullptr) {
          return false;
        }
        building_.push_back(added);
        roles_.push_back(Role::kBuilding);
        return true;
      }
      case Role::kOuter:
        roles_.push_back(NoteContainer(empty) ? Role::kMembers : Role::kSkip);
        return stop_.ok();
      case Role::kSkip:
        roles_.push_back(Role::kSkip);
        return true;
    }
    return true;
  }

  bool Close() {
    const Role role = roles_.back();
    roles_.pop_back();
    if (role == Role::kBuilding) {
      building_.pop_back();
      if (building_.empty()) {
        return Member(std::move(member_));
      }
    }
    return true;
  }

  bool Key(std::string& key) {
    switch (roles_.back()) {
      case Role::kMembers:
        ++members_;
        if (members_ > options_.max_members) {
          return Stop(FileError(options_.source_name, options_.too_many));
        }
        if (members_ % kCancelCheckEvery == 0 && options_.cancelled != nullptr &&
            Cancelled(*options_.cancelled)) {
          return Stop(CancelledWhile(absl::StrCat("parsing the ", options_.what, " of ",
                                                  ShownName(options_.source_name))));
        }
        key_ = std::move(key);
        return true;
      case Role::kOuter:
        key_ = std::move(key);
        return true;
      case Role::kBuilding:
        inner_key_ = std::move(key);
        return true;
      case Role::kSkip:
        return true;
    }
    return true;
  }

  // A value of the top-level object under key_: is it the container? Returns whether it is
  // the container and an object (its members are then streamed).
  bool NoteContainer(const Json& value) {
    if (key_ != options_.container_key) {
      return false;
    }
    if (container_kind_ != nullptr) {
      Stop(FileError(options_.source_name,
                     absl::StrCat(options_.what, " has \"", options_.container_key, "\" twice")));
      return false;
    }
    container_kind_ = KindOf(value);
    container_is_object_ = value.is_object();
    return container_is_object_;
  }

  // Adds a value to the innermost container being built; returns where it now lives.
  Json* Add(Json value) {
    if (++member_values_ > kMaxValuesPerEntry) {
      Stop(
          FileError(options_.source_name, absl::StrCat("entry '", Shown(key_), "' holds more than ",
                                                       kMaxValuesPerEntry, " JSON values")));
      return nullptr;
    }
    Json& parent = *building_.back();
    if (parent.is_array()) {
      // Only the innermost container grows, so the pointers to its ancestors stay valid.
      parent.push_back(std::move(value));
      return &parent.back();
    }
    auto& object = parent.get_ref<Json::object_t&>();
    if (object.find(inner_key_) != object.end()) {
      Stop(FileError(
          options_.source_name,
          absl::StrCat("entry '", Shown(key_), "' repeats the key '", Shown(inner_key_), "'")));
      return nullptr;
    }
    return &object.emplace(std::move(inner_key_), std::move(value)).first->second;
  }

  // A member is complete. After the first error the parse goes on (to report bad JSON ahead
  // of a bad entry) but nothing more is visited.
  bool Member(Json value) {
    if (first_visit_error_.ok()) {
      first_visit_error_ = visit_(std::move(key_), std::move(value));
    }
    return true;
  }

  const Options options_;
  const Visit visit_;

  std::vector<Role> roles_;
  const char* top_kind_ = nullptr;        // set once the top-level value starts
  const char* container_kind_ = nullptr;  // set once container_key's value starts
  bool top_is_object_ = false;
  bool container_is_object_ = false;
  std::string key_;                       // the member (or top-level key) being read
  std::string inner_key_;                 // the key inside the value being built
  Json member_;                           // the member's value being built
  std::vector<Json*> building_;           // its open containers, innermost last
  size_t member_values_ = 0;
  uint64_t members_ = 0;

  std::optional<size_t> syntax_error_at_;
  absl::Status stop_;
  absl::Status first_visit_error_;
};

// ---- One header ------------------------------------------------------------------------------

// A non-negative JSON integer; `what` describes the value for messages.
absl::StatusOr<uint64_t> NonNegativeInteger(const Json& value, absl::string_view what) {
  if (value.is_number_unsigned()) {
    return value.get<uint64_t>();
  }
  if (value.is_number_integer()) {
    return absl::InvalidArgumentError(absl::StrCat(what, " is negative"));
  }
  if (value.is_number_float()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " is not a non-negative integer (a fraction, or over 2^64 - 1)"));
  }
  return absl::InvalidArgumentError(
      absl::StrCat(what, " is not a non-negative integer (", KindOf(value), ")"));
}

std::string ShapeText(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

absl::StatusOr<DType> EntryDType(absl::string_view dtype_name) {
  auto dtype = ParseSafetensorsDType(dtype_name);
  if (dtype.ok()) {
    return dtype;
  }
  // ParseSafetensorsDType quotes the name as it is; show it escaped and keep the valid list.
  const absl::string_view message = dtype.status().message();
  const size_t valid = message.rfind(" (valid: ");
  return absl::InvalidArgumentError(
      absl::StrCat("unknown dtype \"", Shown(dtype_name, kMaxShownDType), "\"",
                   valid == absl::string_view::npos ? "" : message.substr(valid)));
}

// The entry's "dtype".
absl::StatusOr<DType> ParseEntryDType(const std::string& source_name, const std::string& name,
                                      const Json& entry) {
  const auto dtype = entry.find("dtype");
  if (dtype == entry.end()) {
    return TensorError(source_name, name, "\"dtype\" is missing");
  }
  if (!dtype->is_string()) {
    return TensorError(source_name, name,
                       absl::StrCat("\"dtype\" is ", KindOf(*dtype), ", not a string"));
  }
  auto parsed_dtype = EntryDType(dtype->get_ref<const std::string&>());
  if (!parsed_dtype.ok()) {
    return TensorError(source_name, name, parsed_dtype.status().message());
  }
  return *parsed_dtype;
}

// The entry's "shape": dimensions that fit an int64_t.
absl::StatusOr<std::vector<int64_t>> ParseEntryShape(const std::string& source_name,
                                                     const std::string& name, const Json& entry) {
  const auto shape = entry.find("shape");
  if (shape == entry.end()) {
    return TensorError(source_name, name, "\"shape\" is missing");
  }
  if (!shape->is_array()) {
    return TensorError(source_name, name,
                       absl::StrCat("\"shape\" is ", KindOf(*shape), ", not an array"));
  }
  std::vector<int64_t> dims;
  dims.reserve(shape->size());
  for (size_t i = 0; i < shape->size(); ++i) {
    auto dim = NonNegativeInteger((*shape)[i], absl::StrCat("shape[", i, "]"));
    if (!dim.ok()) {
      return TensorError(source_name, name, dim.status().message());
    }
    if (*dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return TensorError(source_name, name,
                         absl::StrCat("shape[", i, "] is too large (over 2^63 - 1)"));
    }
    dims.push_back(static_cast<int64_t>(*dim));
  }
  return dims;
}

// The entry's "data_offsets": [begin, end], begin <= end.
absl::StatusOr<std::pair<uint64_t, uint64_t>> ParseEntryOffsets(const std::string& source_name,
                                                                const std::string& name,
                                                                const Json& entry) {
  const auto offsets = entry.find("data_offsets");
  if (offsets == entry.end()) {
    return TensorError(source_name, name, "\"data_offsets\" is missing");
  }
  if (!offsets->is_array() || offsets->size() != 2) {
    const std::string kind = offsets->is_array() ? absl::StrCat("an array of ", offsets->size())
                                                 : std::string(KindOf(*offsets));
    return TensorError(source_name, name,
                       absl::StrCat("\"data_offsets\" is ", kind, ", not [begin, end]"));
  }
  auto begin = NonNegativeInteger((*offsets)[0], "data_offsets[0]");
  if (!begin.ok()) {
    return TensorError(source_name, name, begin.status().message());
  }
  auto end = NonNegativeInteger((*offsets)[1], "data_offsets[1]");
  if (!end.ok()) {
    return TensorError(source_name, name, end.status().message());
  }
  if (*begin > *end) {
    return TensorError(source_name, name,
                       absl::StrCat("data_offsets [", *begin, ", ", *end,
                                    "] end before they begin"));
  }
  return std::make_pair(*begin, *end);
}

absl::StatusOr<SafetensorsTensor> ParseTensorEntry(const std::string& source_name, std::string name,
                                                   const Json& entry, uint64_t data_start,
                                                   uint64_t file_size) {
  if (!entry.is_object()) {
    return TensorError(source_name, name,
                       absl::StrCat("entry is ", KindOf(entry), ", not an object"));
  }
  SafetensorsTensor tensor;
  DDO_ASSIGN_OR_RETURN(tensor.dtype, ParseEntryDType(source_name, name, entry));
  DDO_ASSIGN_OR_RETURN(tensor.shape, ParseEntryShape(source_name, name, entry));
  DDO_ASSIGN_OR_RETURN(const auto offsets, ParseEntryOffsets(source_name, name, entry));
  const auto [begin, end] = offsets;
  const std::string offsets_text = absl::StrCat("data_offsets [", begin, ", ", end, "]");
  auto byte_size = TensorByteSize(tensor.dtype, tensor.shape);
  if (!byte_size.ok()) {
    return TensorError(source_name, name, byte_size.status().message());
  }
  if (*byte_size != end - begin) {
    return TensorError(
        source_name, name,
        absl::StrCat(SafetensorsDTypeName(tensor.dtype), " ", ShapeText(tensor.shape), " needs ",
                     *byte_size, " bytes but ", offsets_text, " span ", end - begin));
  }
  const uint64_t data_bytes = file_size - data_start;  // the caller checked data_start
  if (end > data_bytes) {
    return TensorError(source_name, name,
                       absl::StrCat(offsets_text, " run past the end of the file (", data_bytes,
                                    " bytes of data)"));
  }
  tensor.name = std::move(name);
  tensor.file_offset = data_start + begin;
  tensor.byte_size = *byte_size;
  return tensor;
}

absl::Status ParseMetadata(const std::string& source_name, const Json& metadata,
                           std::map<std::string, std::string>* out) {
  if (!metadata.is_object()) {
    return FileError(source_name, absl::StrCat("\"", kMetadataKey, "\" is ", KindOf(metadata),
                                               ", not an object of strings"));
  }
  for (const auto& [key, value] : metadata.items()) {
    if (!value.is_string()) {
      return FileError(source_name, absl::StrCat("\"", kMetadataKey, "\" entry '", Shown(key),
                                                 "' is ", KindOf(value), ", not a string"));
    }
    (*out)[key] = value.get<std::string>();
  }
  return absl::OkStatus();
}

// A name listed twice: sort once, compare neighbours. O(n log n).
const SafetensorsTensor* FindRepeatedName(const std::vector<SafetensorsTensor>& tensors) {
  std::vector<const SafetensorsTensor*> by_name;
  by_name.reserve(tensors.size());
  for (const SafetensorsTensor& tensor : tensors) {
    by_name.push_back(&tensor);
  }
  std::sort(
      by_name.begin(), by_name.end(),
      [](const SafetensorsTensor* a, const SafetensorsTensor* b) { return a->name < b->name; });
  for (size_t i = 1; i < by_name.size(); ++i) {
    if (by_name[i]->name == by_name[i - 1]->name) {
      return by_name[i];
    }
  }
  return nullptr;
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
      return TensorError(file.name, tensor.name,
                         absl::StrCat("its data overlaps tensor '", Shown(furthest->name), "'"));
    }
    const uint64_t tensor_end = tensor.file_offset + tensor.byte_size;
    if (tensor_end > covered_end) {
      covered_end = tensor_end;
      furthest = &tensor;
    }
  }
  return absl::OkStatus();
}

// ---- Descriptors -----------------------------------------------------------------------------

const char* FileTypeName(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISLNK(mode)) return "a symbolic link";
  return "not a regular file";
}

// fstat of an open descriptor: a regular file's size, or why it is not one.
absl::StatusOr<struct stat> StatRegular(FileSystem& fs, const SafetensorsSource& source) {
  if (!source.fd.valid()) {
    return FileError(source.name, "no open descriptor");
  }
  DDO_ASSIGN_OR_RETURN(const struct stat info, fs.Stat(source.fd.get(), ShownName(source.name)));
  if (!S_ISREG(info.st_mode)) {
    return FileError(source.name,
                     absl::StrCat("not a regular file (", FileTypeName(info.st_mode), ")"));
  }
  return info;
}

// Identity of a file behind any symlinks, spellings of its path and descriptors.
using FileId = std::pair<uint64_t, uint64_t>;

FileId IdOf(const struct stat& info) {
  return {static_cast<uint64_t>(info.st_dev), static_cast<uint64_t>(info.st_ino)};
}

absl::string_view BaseName(absl::string_view name) {
  const size_t slash = name.rfind('/');
  return slash == absl::string_view::npos ? name : name.substr(slash + 1);
}

// ---- Sets ------------------------------------------------------------------------------------

// Every tensor of a set, by name: (name, index of its file), sorted.
using Owners = std::vector<std::pair<absl::string_view, size_t>>;

const size_t* FindOwner(const Owners& owners, absl::string_view tensor) {
  auto it = std::lower_bound(
      owners.begin(), owners.end(), tensor,
      [](const auto& entry, absl::string_view name) { return entry.first < name; });
  return it != owners.end() && it->first == tensor ? &it->second : nullptr;
}

absl::Status ValidateIndex(FileSystem& fs, const SafetensorsSource& index,
                           const std::vector<SafetensorsFile>& files, const Owners& owners,
                           const CancelledFn& cancelled) {
  DDO_ASSIGN_OR_RETURN(const struct stat info, StatRegular(fs, index));
  const uint64_t size = static_cast<uint64_t>(info.st_size);
  if (size > kMaxSafetensorsIndexBytes) {
    return FileError(index.name, absl::StrCat("index is ", size, " bytes, over the ",
                                              kMaxSafetensorsIndexBytes >> 20, " MiB limit"));
  }
  std::string text(size, '\0');
  DDO_RETURN_IF_ERROR(ReadFully(index.fd.get(), 0, text.data(), size, ShownName(index.name), &fs));
  DDO_ASSIGN_OR_RETURN(const SafetensorsIndex parsed,
                       ParseSafetensorsIndex(index.name, text, cancelled));

  // Shards are known by base name, which must then tell the files apart.
  std::map<absl::string_view, size_t> file_by_base_name;
  for (size_t i = 0; i < files.size(); ++i) {
    const auto [it, inserted] = file_by_base_name.emplace(BaseName(files[i].name), i);
    if (!inserted) {
      return FileError(
          index.name,
          absl::StrCat("two files being loaded are named '", Shown(it->first), "' (",
                       ShownName(files[it->second].name), " and ", ShownName(files[i].name),
                       "): the index cannot tell them apart"));
    }
  }

  std::vector<bool> listed(files.size(), false);
  uint64_t checked = 0;
  for (const auto& [tensor, shard] : parsed.weight_map) {
    if (++checked % kCancelCheckEvery == 0 && Cancelled(cancelled)) {
      return CancelledWhile(absl::StrCat("checking the index ", ShownName(index.name)));
    }
    const auto file = file_by_base_name.find(shard);
    if (file == file_by_base_name.end()) {
      return FileError(index.name, absl::StrCat("weight_map lists shard '", Shown(shard),
                                                "', which is not among the files being loaded"));
    }
    listed[file->second] = true;
    const size_t* holder = FindOwner(owners, tensor);
    if (holder == nullptr) {
      return FileError(index.name,
                       absl::StrCat("weight_map lists tensor '", Shown(tensor), "' in shard '",
                                    Shown(shard), "', but no file being loaded holds it"));
    }
    if (*holder != file->second) {
      return FileError(index.name, absl::StrCat("weight_map puts tensor '", Shown(tensor),
                                                "' in shard '", Shown(shard), "', but it is in ",
                                                ShownName(files[*holder].name)));
    }
  }
  for (size_t i = 0; i < files.size(); ++i) {
    if (!listed[i]) {
      return FileError(index.name,
                       absl::StrCat("weight_map does not list shard ", ShownName(files[i].name),
                                    ", which is being loaded"));
    }
  }
  // Every entry named a distinct tensor of the files: any tensor left over is not listed.
  if (parsed.weight_map.size() != owners.size()) {
    std::vector<absl::string_view> listed_names;
    listed_names.reserve(parsed.weight_map.size());
    for (const auto& entry : parsed.weight_map) {
      listed_names.push_back(entry.first);
    }
    std::sort(listed_names.begin(), listed_names.end());
    for (const SafetensorsFile& file : files) {
      for (const SafetensorsTensor& tensor : file.tensors) {
        if (!std::binary_search(listed_names.begin(), listed_names.end(),
                                absl::string_view(tensor.name))) {
          return FileError(index.name, absl::StrCat("weight_map lacks tensor '", Shown(tensor.name),
                                                    "' of ", ShownName(file.name)));
        }
      }
    }
  }
  return absl::OkStatus();
}

// ---- Paths (ddod's own user only) ------------------------------------------------------------

absl::Status CheckInputPath(absl::string_view what, const std::string& path) {
  if (path.find('\0') != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(what, " contains a NUL byte"));
  }
  if (path.empty() || path[0] != '/') {
    return absl::InvalidArgumentError(absl::StrCat(what, " must be an absolute path, not \"",
                                                   Shown(path, kMaxShownPath),
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

// Opens a path once for reading. O_NONBLOCK: opening a FIFO or a device must not block ddod;
// anything but a regular file is refused right after, and the descriptor of a regular file
// is made blocking again.
absl::StatusOr<SafetensorsSource> OpenRegularFile(const std::string& path) {
  SafetensorsSource source{
      path, UniqueFd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK))};
  if (!source.fd.valid()) {
    return PosixError(absl::StrCat("open ", ShownName(path)), errno);
  }
  DDO_RETURN_IF_ERROR(StatRegular(*FileSystem::Default(), source).status());
  const int flags = ::fcntl(source.fd.get(), F_GETFL);
  if (flags < 0 || ::fcntl(source.fd.get(), F_SETFL, flags & ~O_NONBLOCK) != 0) {
    return PosixError(absl::StrCat("fcntl ", ShownName(path)), errno);
  }
  return source;
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
    return PosixError(absl::StrCat("list ", ShownName(folder)), error.value());
  }
  std::sort(shards->begin(), shards->end());
  std::sort(indexes->begin(), indexes->end());
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<SafetensorsFile> ParseSafetensorsHeader(const std::string& name,
                                                       absl::string_view header_json,
                                                       uint64_t file_size,
                                                       const CancelledFn& cancelled) {
  SafetensorsFile file;
  file.name = name;
  file.file_size = file_size;
  file.data_start = kLengthPrefixBytes + header_json.size();
  if (header_json.size() > kMaxSafetensorsHeaderBytes) {
    return FileError(name, absl::StrCat("the header is over the ", kMaxSafetensorsHeaderBytes >> 20,
                                        " MiB limit"));
  }
  if (file.data_start > file_size) {
    return FileError(name,
                     absl::StrCat("header (", header_json.size(),
                                  " bytes) runs past the end of the file (", file_size, " bytes)"));
  }

  bool seen_metadata = false;
  MemberStream::Options options;
  options.source_name = name;
  options.what = "header";
  options.max_members = kMaxSafetensorsEntries;
  options.too_many =
      absl::StrCat("the header has more than ", kMaxSafetensorsEntries, " entries (the limit)");
  options.cancelled = &cancelled;
  MemberStream stream(std::move(options), [&](std::string key, Json value) -> absl::Status {
    if (key == kMetadataKey) {
      if (seen_metadata) {
        return FileError(name, absl::StrCat("the header has \"", kMetadataKey, "\" twice"));
      }
      seen_metadata = true;
      return ParseMetadata(name, value, &file.metadata);
    }
    if (key.empty()) {
      return FileError(name, "a tensor has an empty name");
    }
    DDO_ASSIGN_OR_RETURN(SafetensorsTensor tensor,
                         ParseTensorEntry(name, std::move(key), value, file.data_start, file_size));
    file.tensors.push_back(std::move(tensor));
    return absl::OkStatus();
  });
  DDO_RETURN_IF_ERROR(stream.Run(header_json));

  if (file.tensors.empty()) {
    return FileError(name, "the header lists no tensors");
  }
  if (const SafetensorsTensor* repeated = FindRepeatedName(file.tensors); repeated != nullptr) {
    return TensorError(name, repeated->name, "the header lists this name more than once");
  }
  if (Cancelled(cancelled)) {
    return CancelledWhile(absl::StrCat("parsing the header of ", ShownName(name)));
  }
  std::sort(file.tensors.begin(), file.tensors.end(),
            [](const SafetensorsTensor& a, const SafetensorsTensor& b) {
              return std::tie(a.file_offset, a.byte_size, a.name) <
                     std::tie(b.file_offset, b.byte_size, b.name);
            });
  DDO_RETURN_IF_ERROR(CheckNoOverlap(file));
  return file;
}

absl::StatusOr<SafetensorsFile> ReadSafetensorsFile(const SafetensorsSource& source,
                                                    const CancelledFn& cancelled, FileSystem* fs) {
  if (fs == nullptr) fs = FileSystem::Default();
  DDO_ASSIGN_OR_RETURN(const struct stat info, StatRegular(*fs, source));
  const uint64_t file_size = static_cast<uint64_t>(info.st_size);
  if (file_size < kLengthPrefixBytes + kMinHeaderBytes) {
    return FileError(source.name, absl::StrCat("file is ", file_size,
                                               " bytes, too short for a safetensors header"));
  }
  unsigned char prefix[kLengthPrefixBytes] = {};
  DDO_RETURN_IF_ERROR(ReadFully(source.fd.get(), 0, reinterpret_cast<char*>(prefix), sizeof(prefix),
                                ShownName(source.name), fs));
  uint64_t header_bytes = 0;
  for (size_t i = 0; i < kLengthPrefixBytes; ++i) {
    header_bytes |= uint64_t{prefix[i]} << (8 * i);  // little-endian on every host
  }
  // The value itself is never shown: for a file that is not safetensors it is its content.
  const char* out_of_range = header_bytes < kMinHeaderBytes              ? "below the minimum of 2"
                             : header_bytes > kMaxSafetensorsHeaderBytes ? "over the 64 MiB limit"
                             : header_bytes > file_size - kLengthPrefixBytes
                                 ? "past the end of the file"
                                 : nullptr;
  static_assert(kMaxSafetensorsHeaderBytes == uint64_t{64} << 20, "update the message above");
  if (out_of_range != nullptr) {
    return FileError(source.name,
                     absl::StrCat("not a safetensors file: the 8-byte header length is out of "
                                  "range (",
                                  out_of_range, ")"));
  }
  std::string header(header_bytes, '\0');
  DDO_RETURN_IF_ERROR(ReadFully(source.fd.get(), kLengthPrefixBytes, header.data(), header_bytes,
                                ShownName(source.name), fs));
  return ParseSafetensorsHeader(source.name, header, file_size, cancelled);
}

absl::StatusOr<SafetensorsIndex> ParseSafetensorsIndex(const std::string& name,
                                                       absl::string_view text,
                                                       const CancelledFn& cancelled) {
  if (text.size() > kMaxSafetensorsIndexBytes) {
    return FileError(
        name, absl::StrCat("index is over the ", kMaxSafetensorsIndexBytes >> 20, " MiB limit"));
  }
  SafetensorsIndex index;
  MemberStream::Options options;
  options.source_name = name;
  options.what = "index";
  options.container_key = kWeightMapKey;
  options.max_members = kMaxSafetensorsIndexEntries;
  options.too_many = absl::StrCat("weight_map has more than ", kMaxSafetensorsIndexEntries,
                                  " entries (the limit)");
  options.cancelled = &cancelled;
  MemberStream stream(std::move(options), [&](std::string tensor, Json shard) -> absl::Status {
    if (!shard.is_string()) {
      return FileError(name, absl::StrCat("weight_map entry '", Shown(tensor), "' is ",
                                          KindOf(shard), ", not a shard file name"));
    }
    index.weight_map.emplace_back(std::move(tensor), std::move(shard.get_ref<std::string&>()));
    return absl::OkStatus();
  });
  DDO_RETURN_IF_ERROR(stream.Run(text));
  if (!stream.container_is_object()) {
    return FileError(name, "index has no \"weight_map\" object");
  }

  std::vector<absl::string_view> tensors;
  tensors.reserve(index.weight_map.size());
  for (const auto& entry : index.weight_map) {
    tensors.push_back(entry.first);
  }
  std::sort(tensors.begin(), tensors.end());
  const auto repeated = std::adjacent_find(tensors.begin(), tensors.end());
  if (repeated != tensors.end()) {
    return FileError(
        name, absl::StrCat("weight_map lists tensor '", Shown(*repeated), "' more than once"));
  }
  return index;
}

absl::StatusOr<SafetensorsSet> OpenSafetensorsSet(std::vector<SafetensorsSource> files,
                                                  std::optional<SafetensorsSource> index,
                                                  const CancelledFn& cancelled, FileSystem* fs) {
  if (fs == nullptr) fs = FileSystem::Default();
  if (files.empty()) {
    return absl::InvalidArgumentError("no safetensors files given");
  }
  SafetensorsSet set;
  set.files.reserve(files.size());  // no reallocation: Owners points into the tensors
  std::set<FileId> seen;
  for (SafetensorsSource& source : files) {
    DDO_ASSIGN_OR_RETURN(const struct stat info, StatRegular(*fs, source));
    if (!seen.insert(IdOf(info)).second) {
      continue;  // reached twice (a folder and a file in it, or a symlink)
    }
    DDO_ASSIGN_OR_RETURN(SafetensorsFile file, ReadSafetensorsFile(source, cancelled, fs));
    file.fd = std::move(source.fd);
    set.files.push_back(std::move(file));
  }

  Owners owners;
  for (size_t i = 0; i < set.files.size(); ++i) {
    for (const SafetensorsTensor& tensor : set.files[i].tensors) {
      owners.emplace_back(tensor.name, i);
      set.total_bytes += tensor.byte_size;
    }
  }
  if (Cancelled(cancelled)) {
    return CancelledWhile("checking the safetensors files");
  }
  std::sort(owners.begin(), owners.end());
  for (size_t i = 1; i < owners.size(); ++i) {
    if (owners[i].first == owners[i - 1].first) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", Shown(owners[i].first), "' is in both ",
                       ShownName(set.files[owners[i - 1].second].name), " and ",
                       ShownName(set.files[owners[i].second].name)));
    }
  }

  if (index.has_value()) {
    DDO_RETURN_IF_ERROR(ValidateIndex(*fs, *index, set.files, owners, cancelled));
    set.index_name = index->name;
  }
  return set;
}

absl::StatusOr<std::pair<std::vector<SafetensorsSource>, std::optional<SafetensorsSource>>>
OpenSafetensorsPaths(const std::vector<std::string>& inputs, const std::string& index_file) {
  if (inputs.empty()) {
    return absl::InvalidArgumentError("no safetensors files or folders given");
  }
  if (!index_file.empty()) {
    DDO_RETURN_IF_ERROR(CheckInputPath("index_file", index_file));
  }
  for (const std::string& input : inputs) {
    DDO_RETURN_IF_ERROR(CheckInputPath("a safetensors file or folder", input));
  }

  std::vector<std::string> paths;
  std::vector<std::string> folder_indexes;
  for (const std::string& input : inputs) {
    const std::string path = Normalize(input);
    // stat first so that a folder is listed rather than opened; what gets read is decided by
    // the fstat of the descriptor below.
    struct stat info {};
    if (::stat(path.c_str(), &info) != 0) {
      return PosixError(absl::StrCat("stat ", ShownName(path)), errno);
    }
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
      return FileError(path, absl::StrCat("neither a regular file nor a folder (",
                                          FileTypeName(info.st_mode), ")"));
    }
  }

  std::string index_path;
  if (!index_file.empty()) {
    index_path = Normalize(index_file);
  } else {
    std::sort(folder_indexes.begin(), folder_indexes.end());
    folder_indexes.erase(std::unique(folder_indexes.begin(), folder_indexes.end()),
                         folder_indexes.end());
    if (folder_indexes.size() > 1) {
      std::vector<std::string> shown;
      for (const std::string& path : folder_indexes) {
        shown.push_back(ShownName(path));
      }
      return absl::InvalidArgumentError(
          absl::StrCat("several index files apply (", absl::StrJoin(shown, ", "),
                       "): load one folder at a time or name index_file"));
    }
    if (folder_indexes.size() == 1) {
      index_path = folder_indexes.front();
    }
  }

  std::pair<std::vector<SafetensorsSource>, std::optional<SafetensorsSource>> opened;
  opened.first.reserve(paths.size());
  for (const std::string& path : paths) {
    DDO_ASSIGN_OR_RETURN(SafetensorsSource source, OpenRegularFile(path));
    opened.first.push_back(std::move(source));
  }
  if (!index_path.empty()) {
    DDO_ASSIGN_OR_RETURN(SafetensorsSource source, OpenRegularFile(index_path));
    opened.second = std::move(source);
  }
  return opened;
}

}  // namespace ddo
