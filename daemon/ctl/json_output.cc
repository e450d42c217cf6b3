#include "daemon/ctl/json_output.h"

#include <cctype>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/string_view.h"

namespace ddo {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

// "ComponentState" -> "COMPONENT_STATE_".
std::string EnumPrefix(const std::string& type_name) {
  std::string prefix;
  for (size_t i = 0; i < type_name.size(); ++i) {
    const char c = type_name[i];
    if (i > 0 && std::isupper(static_cast<unsigned char>(c))) prefix += '_';
    prefix += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  }
  return prefix + "_";
}

nlohmann::json EnumJson(const FieldDescriptor& field, int number) {
  const auto* value = field.enum_type()->FindValueByNumber(number);
  if (value == nullptr) return number;  // a value this ddoctl does not know
  return ShortEnumName(*value);
}

// One value of `field` (element `index` of a repeated field, else the singular value).
nlohmann::json FieldValue(const Message& message, const FieldDescriptor& field, int index) {
  const Reflection& r = *message.GetReflection();
  const bool repeated = field.is_repeated();
  switch (field.cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      return repeated ? r.GetRepeatedInt32(message, &field, index) : r.GetInt32(message, &field);
    case FieldDescriptor::CPPTYPE_INT64:
      return repeated ? r.GetRepeatedInt64(message, &field, index) : r.GetInt64(message, &field);
    case FieldDescriptor::CPPTYPE_UINT32:
      return repeated ? r.GetRepeatedUInt32(message, &field, index)
                      : r.GetUInt32(message, &field);
    case FieldDescriptor::CPPTYPE_UINT64:
      return repeated ? r.GetRepeatedUInt64(message, &field, index)
                      : r.GetUInt64(message, &field);
    case FieldDescriptor::CPPTYPE_DOUBLE:
      return repeated ? r.GetRepeatedDouble(message, &field, index)
                      : r.GetDouble(message, &field);
    case FieldDescriptor::CPPTYPE_FLOAT:
      return repeated ? r.GetRepeatedFloat(message, &field, index) : r.GetFloat(message, &field);
    case FieldDescriptor::CPPTYPE_BOOL:
      return repeated ? r.GetRepeatedBool(message, &field, index) : r.GetBool(message, &field);
    case FieldDescriptor::CPPTYPE_ENUM:
      return EnumJson(field, repeated ? r.GetRepeatedEnumValue(message, &field, index)
                                      : r.GetEnumValue(message, &field));
    case FieldDescriptor::CPPTYPE_STRING: {
      const std::string text =
          repeated ? r.GetRepeatedString(message, &field, index) : r.GetString(message, &field);
      if (field.type() == FieldDescriptor::TYPE_BYTES) return absl::Base64Escape(text);
      return text;
    }
    case FieldDescriptor::CPPTYPE_MESSAGE:
      return MessageToPlainJson(repeated ? r.GetRepeatedMessage(message, &field, index)
                                         : r.GetMessage(message, &field));
  }
  return nullptr;
}

// A map entry's key as a JSON object key.
std::string MapKey(const Message& entry) {
  const FieldDescriptor& key = *entry.GetDescriptor()->map_key();
  const nlohmann::json value = FieldValue(entry, key, 0);
  return value.is_string() ? value.get<std::string>() : value.dump();
}

}  // namespace

std::string ShortEnumName(const google::protobuf::EnumValueDescriptor& value) {
  // The zero value names the prefix where it is <PREFIX>UNSPECIFIED (DTYPE_UNSPECIFIED of
  // DType); else the type's name gives it.
  constexpr absl::string_view kUnspecified = "UNSPECIFIED";
  const auto* zero = value.type()->FindValueByNumber(0);
  const std::string prefix = zero != nullptr && absl::EndsWith(zero->name(), kUnspecified)
                                 ? zero->name().substr(0, zero->name().size() - kUnspecified.size())
                                 : EnumPrefix(value.type()->name());
  std::string name = value.name();
  if (absl::StartsWith(name, prefix) && name.size() > prefix.size()) {
    name = name.substr(prefix.size());
  }
  return absl::AsciiStrToLower(name);
}

nlohmann::json MessageToPlainJson(const google::protobuf::Message& message) {
  nlohmann::json out = nlohmann::json::object();
  const auto* descriptor = message.GetDescriptor();
  const Reflection& r = *message.GetReflection();
  for (int i = 0; i < descriptor->field_count(); ++i) {
    const FieldDescriptor& field = *descriptor->field(i);
    if (field.is_map()) {
      nlohmann::json map = nlohmann::json::object();
      for (int k = 0; k < r.FieldSize(message, &field); ++k) {
        const Message& entry = r.GetRepeatedMessage(message, &field, k);
        map[MapKey(entry)] = FieldValue(entry, *entry.GetDescriptor()->map_value(), 0);
      }
      out[field.name()] = std::move(map);
    } else if (field.is_repeated()) {
      nlohmann::json list = nlohmann::json::array();
      for (int k = 0; k < r.FieldSize(message, &field); ++k) {
        list.push_back(FieldValue(message, field, k));
      }
      out[field.name()] = std::move(list);
    } else if (field.cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE ||
               field.containing_oneof() != nullptr) {
      if (r.HasField(message, &field)) out[field.name()] = FieldValue(message, field, 0);
    } else {
      out[field.name()] = FieldValue(message, field, 0);
    }
  }
  return out;
}

}  // namespace ddo
