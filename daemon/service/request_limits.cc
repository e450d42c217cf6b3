// File: daemon/service/request_limits.cc
#include "daemon/service/request_limits.h"

#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "ddo/wire/display_text.h"

namespace ddo {
namespace {

// Bytes of an offending string that a message shows (escaped).
constexpr size_t kShownBytes = 32;
constexpr size_t kNoIndex = SIZE_MAX;

// Which bytes a string may hold.
enum class Chars {
  kPrintable,    // keys, names, ids, paths: no byte below 0x20, no 0x7f (so no NUL)
  kPrintableOrTab,  // setting values: as kPrintable, but a tab is allowed
  kAny,          // free text checked elsewhere (a profile's JSON): size only
};

// A field of the request, named only when there is something to report:
// "<name>[<index>]['<key>']<member>".
struct FieldRef {
  absl::string_view name;
  size_t index = kNoIndex;
  const std::string* key = nullptr;
  absl::string_view member;
};

FieldRef Field(absl::string_view name) { return FieldRef{name, kNoIndex, nullptr, {}}; }
FieldRef Element(absl::string_view name, size_t index, absl::string_view member = {}) {
  return FieldRef{name, index, nullptr, member};
}
FieldRef MapValue(absl::string_view name, const std::string& key) {
  return FieldRef{name, kNoIndex, &key, {}};
}
FieldRef MapKey(absl::string_view name) { return FieldRef{name, kNoIndex, nullptr, " (a key)"}; }

// Collects the first problem of one request; later checks are skipped once one is found.
class Checker {
 public:
  explicit Checker(absl::string_view message) : message_(message) {}

  bool ok() const { return status_.ok(); }
  absl::Status status() const { return status_; }

  void Text(const FieldRef& field, absl::string_view value, size_t max_bytes, Chars chars) {
    if (!ok()) return;
    if (value.size() > max_bytes) {
      Fail(absl::StatusCode::kInvalidArgument, field,
           absl::StrCat("'", EscapeForDisplay(value, kShownBytes), "' is ", value.size(),
                        " bytes, at most ", max_bytes, " allowed"));
      return;
    }
    if (chars == Chars::kAny) return;
    for (size_t i = 0; i < value.size(); ++i) {
      const auto byte = static_cast<unsigned char>(value[i]);
      // U+0080..U+009F (C1 controls, UTF-8 0xC2 0x80..0x9F) steer terminals as ESC does.
      const bool c1_control = byte == 0xc2 && i + 1 < value.size() &&
                              static_cast<unsigned char>(value[i + 1]) >= 0x80 &&
                              static_cast<unsigned char>(value[i + 1]) <= 0x9f;
      if (byte >= 0x20 && byte != 0x7f && !c1_control) continue;
      if (byte == '\t' && chars == Chars::kPrintableOrTab) continue;
      Fail(absl::StatusCode::kInvalidArgument, field,
           absl::StrCat("'", EscapeForDisplay(value, kShownBytes), "' holds a control character (",
                        EscapeForDisplay(value.substr(i, c1_control ? 2 : 1)), " at byte ", i,
                        "); it must be printable"));
      return;
    }
  }

  void Count(const FieldRef& field, size_t count, size_t max_count) {
    if (!ok() || count <= max_count) return;
    Fail(absl::StatusCode::kResourceExhausted, field,
         absl::StrCat(count, " entries, at most ", max_count, " allowed"));
  }

  void Enum(const FieldRef& field, int value, bool known) {
    if (!ok() || known) return;
    Fail(absl::StatusCode::kInvalidArgument, field, absl::StrCat(value, " is not a known value"));
  }

  // A map<string, string> of settings (DDO_* names, or component policy keys).
  template <typename Map>
  void Settings(absl::string_view name, const Map& settings) {
    Count(Field(name), settings.size(), kMaxSettingsEntries);
    for (const auto& [key, value] : settings) {
      if (!ok()) return;
      Text(MapKey(name), key, kMaxSettingNameBytes, Chars::kPrintable);
      Text(MapValue(name, key), value, kMaxSettingValueBytes, Chars::kPrintableOrTab);
    }
  }

  // A repeated string field whose entries are names of one kind.
  template <typename Repeated>
  void Names(absl::string_view name, const Repeated& values, size_t max_count, size_t max_bytes) {
    Count(Field(name), static_cast<size_t>(values.size()), max_count);
    for (int i = 0; i < values.size() && ok(); ++i) {
      Text(Element(name, static_cast<size_t>(i)), values.Get(i), max_bytes, Chars::kPrintable);
    }
  }

  template <typename Repeated>
  void Tensors(absl::string_view name, const Repeated& tensors) {
    Count(Field(name), static_cast<size_t>(tensors.size()), kMaxTensors);
    for (int i = 0; i < tensors.size() && ok(); ++i) {
      const ddo::v1::TensorSpec& tensor = tensors.Get(i);
      const auto index = static_cast<size_t>(i);
      Text(Element(name, index, ".name"), tensor.name(), kMaxTensorNameBytes, Chars::kPrintable);
      Text(Element(name, index, ".module_path"), tensor.module_path(), kMaxTensorNameBytes,
           Chars::kPrintable);
      Text(Element(name, index, ".module_class"), tensor.module_class(), kMaxModuleClassBytes,
           Chars::kPrintable);
      Enum(Element(name, index, ".dtype"), tensor.dtype(), ddo::v1::DType_IsValid(tensor.dtype()));
      Count(Element(name, index, ".shape"), static_cast<size_t>(tensor.shape_size()),
            kMaxTensorRank);
    }
  }

 private:
  void Fail(absl::StatusCode code, const FieldRef& field, absl::string_view problem) {
    std::string where = absl::StrCat(message_, ".", field.name);
    if (field.index != kNoIndex) absl::StrAppend(&where, "[", field.index, "]");
    if (field.key != nullptr) {
      absl::StrAppend(&where, "['", EscapeForDisplay(*field.key, kShownBytes), "']");
    }
    absl::StrAppend(&where, field.member);
    status_ = absl::Status(code, absl::StrCat(where, ": ", problem));
  }

  absl::string_view message_;
  absl::Status status_;
};

void CacheKey(Checker& check, absl::string_view field, const std::string& key) {
  check.Text(Field(field), key, kMaxCacheKeyBytes, Chars::kPrintable);
}
void Id(Checker& check, absl::string_view field, const std::string& id) {
  check.Text(Field(field), id, kMaxIdBytes, Chars::kPrintable);
}
void Path(Checker& check, absl::string_view field, const std::string& path) {
  check.Text(Field(field), path, kMaxPathBytes, Chars::kPrintable);
}
void Hash(Checker& check, absl::string_view field, const std::string& hash) {
  check.Text(Field(field), hash, kMaxHashBytes, Chars::kPrintable);
}
void CheckProfileRef(Checker& check, absl::string_view field_name, absl::string_view field_key,
                const ddo::v1::ProfileRef& ref) {
  check.Text(Field(field_name), ref.name(), kMaxProfileNameBytes, Chars::kPrintable);
  check.Text(Field(field_key), ref.key(), kMaxProfileKeyBytes, Chars::kPrintable);
}

}  // namespace

absl::Status CheckFileName(absl::string_view name) {
  Checker check("FILE");
  check.Text(Field("name"), name, kMaxFileNameBytes, Chars::kPrintable);
  if (!check.ok()) return check.status();
  if (name.empty() || name == "." || name == ".." || name.find('/') != absl::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("FILE.name: '", EscapeForDisplay(name, kShownBytes),
                     "' is not a base name (1 to ", kMaxFileNameBytes,
                     " bytes, no '/', not '.' or '..')"));
  }
  return absl::OkStatus();
}

absl::Status CheckRequest(const ddo::v1::GetInfoRequest&) { return absl::OkStatus(); }
absl::Status CheckRequest(const ddo::v1::GetStatsRequest&) { return absl::OkStatus(); }
absl::Status CheckRequest(const ddo::v1::ListPresetsRequest&) { return absl::OkStatus(); }
absl::Status CheckRequest(const ddo::v1::ListComponentsRequest&) { return absl::OkStatus(); }
absl::Status CheckRequest(const ddo::v1::ListSessionsRequest&) { return absl::OkStatus(); }

absl::Status CheckRequest(const ddo::v1::ResolveSettingsRequest& request) {
  Checker check("ResolveSettingsRequest");
  check.Text(Field("preset"), request.preset(), kMaxPresetNameBytes, Chars::kPrintable);
  check.Settings("environment", request.environment());
  check.Settings("overrides", request.overrides());
  check.Names("components", request.components(), kMaxComponents, kMaxComponentNameBytes);
  check.Count(Field("component_policies"), request.component_policies().size(), kMaxComponents);
  for (const auto& [component, policy] : request.component_policies()) {
    if (!check.ok()) break;
    check.Text(MapKey("component_policies"), component, kMaxComponentNameBytes, Chars::kPrintable);
    const std::string values = absl::StrCat(
        "component_policies['", EscapeForDisplay(component, kShownBytes), "'].values");
    check.Settings(values, policy.values());
  }
  return check.status();
}

absl::Status CheckRequest(const ddo::v1::ExplainPlanRequest& request) {
  Checker check("ExplainPlanRequest");
  check.Tensors("tensors", request.tensors());
  Id(check, "device_uuid", request.device_uuid());
  check.Settings("settings", request.settings());
  check.Text(Field("component"), request.component(), kMaxComponentNameBytes, Chars::kPrintable);
  return check.status();
}

absl::Status CheckRequest(const ddo::v1::ConnectRequest& request) {
  Checker check("ConnectRequest");
  check.Text(Field("client_name"), request.client_name(), kMaxClientNameBytes, Chars::kPrintable);
  return check.status();
}

absl::Status CheckRequest(const ddo::v1::RegisterComponentRequest& request) {
  Checker check("RegisterComponentRequest");
  Id(check, "lease_id", request.lease_id());
  CacheKey(check, "cache_key", request.cache_key());
  Hash(check, "content_hash", request.content_hash());
  check.Tensors("tensors", request.tensors());
  CacheKey(check, "base_cache_key", request.base_cache_key());
  check.Names("changed_tensors", request.changed_tensors(), kMaxTensors, kMaxTensorNameBytes);
  return check.status();
}

absl::Status CheckRequest(const ddo::v1::CommitUploadRequest& request) {
  Checker check("CommitUploadRequest");
  Id(check, "lease_id", request.lease_id());
  Id(check, "upload_id", request.upload_id());
  return check.status();
}

absl::Status CheckRequest(const ddo::v1::AbortUploadRequest& request) {
  Checker check("AbortUploadRequest");
  Id(check, "lease_id", request.lease_id());
  Id(check, "upload_id", request.upload_id());
  return check.status();
}

absl::Status CheckRequest(const ddo::v1::LoadSafetensorsRequest& request) {
  Checker check("LoadSafetensorsRequest");
  Id(check, "lease_id", request.lease_id());
  CacheKey(check, "cache_key", request.cache_key());
  Hash(check, "content_hash", request.content_hash());
  check.Names("files", request.files(), kMaxFiles, kMaxPathBytes);
  Path(check, "index_file", request.index_file());
  check.Count(Field("file_handles"), static_cast<size_t>(request.file_handles_size()),
              kMaxFileHandles);
  check.Count(Field("units"), request.units().size(), kMaxTensors);
  for (const auto& unit : request.units()) {
    if (!check.ok()) break;
    check.Text(MapKey("units"), unit.first, kMaxTensorNameBytes, Chars::kPrintable);
  }
  check.Enum(Field("file_tier"), request.file_tier(),
             ddo::v1::FileTier_IsValid(request.file_tier()));
  return check.status();
}

absl::Status CheckRequest(const ddo::v1::GetComponentRequest& request) {
  Checker check("GetComponentRequest");
  CacheKey(check, "cache_key", request.cache_key());
  return check.status();
}

absl::Status CheckRequest(const ddo::v1::EvictComponentRequest& request) {
  Checker check("EvictComponentRequest");
  CacheKey(check, "cache_key", request.cache_key());
  return check.status();
}

absl::Status CheckRequest(const ddo::v1::AttachRequest& request) {
  Checker check("AttachRequest");
  Id(check, "lease_id", request.lease_id());
  CacheKey(check, "cache_key", request.cache_key());
  Id(check, "device_uuid", request.device_uuid());
  check.Settings("settings", request.settings());
  check.Names("streamable", request.streamable(), kMaxTensors, kMaxTensorNameBytes);
  return check.status();
}

absl::Status CheckRequest(const ddo::v1::DetachRequest& request) {
  Checker check("DetachRequest");
  Id(check, "session_id", request.session_id());
  return check.status();
}

absl::Status CheckRequest(const ddo::v1::SetScheduleRequest& request) {
  Checker check("SetScheduleRequest");
  Id(check, "session_id", request.session_id());
  check.Count(Field("unit_order"), static_cast<size_t>(request.unit_order_size()),
              kMaxScheduleUses);
  check.Count(Field("weight_rows"), request.weight_rows().size(), kMaxTensors);
  for (const auto& [weight, rows] : request.weight_rows()) {
    if (!check.ok()) break;
    check.Text(MapKey("weight_rows"), weight, kMaxTensorNameBytes, Chars::kPrintable);
  }
  return check.status();
}

absl::Status CheckRequest(const ddo::v1::PhaseRequest& request) {
  Checker check("PhaseRequest");
  Id(check, "lease_id", request.lease_id());
  check.Enum(Field("phase"), request.phase(), ddo::v1::PhaseKind_IsValid(request.phase()));
  check.Names("needed", request.needed(), kMaxPhaseComponents, kMaxCacheKeyBytes);
  check.Names("prefetch", request.prefetch(), kMaxPhaseComponents, kMaxCacheKeyBytes);
  return check.status();
}

absl::Status CheckRequest(const ddo::v1::ListProfilesRequest& request) {
  Checker check("ListProfilesRequest");
  Path(check, "profile_dir", request.profile_dir());
  return check.status();
}

absl::Status CheckRequest(const ddo::v1::GetProfileRequest& request) {
  Checker check("GetProfileRequest");
  CheckProfileRef(check, "ref.name", "ref.key", request.ref());
  Path(check, "profile_dir", request.profile_dir());
  return check.status();
}

absl::Status CheckRequest(const ddo::v1::PutProfileRequest& request) {
  Checker check("PutProfileRequest");
  CheckProfileRef(check, "profile.ref.name", "profile.ref.key", request.profile().ref());
  check.Text(Field("profile.json"), request.profile().json(), kMaxProfileJsonBytes, Chars::kAny);
  Path(check, "profile_dir", request.profile_dir());
  return check.status();
}

absl::Status CheckRequest(const ddo::v1::DeleteProfileRequest& request) {
  Checker check("DeleteProfileRequest");
  CheckProfileRef(check, "ref.name", "ref.key", request.ref());
  Path(check, "profile_dir", request.profile_dir());
  return check.status();
}

}  // namespace ddo
