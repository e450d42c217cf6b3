// File: daemon/policy/settings_resolver.cc
#include "daemon/policy/settings_resolver.h"

#include <optional>
#include <set>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "daemon/common/status_macros.h"
#include "daemon/config/presets.h"
#include "daemon/config/setting_catalog.h"

namespace ddo {
namespace {

using ddo::v1::SettingSource;
using StringMap = google::protobuf::Map<std::string, std::string>;

const char* SourceName(SettingSource source) {
  switch (source) {
    case ddo::v1::SETTING_SOURCE_REQUEST:
      return "the request's overrides";
    case ddo::v1::SETTING_SOURCE_ENVIRONMENT:
      return "the client's environment";
    case ddo::v1::SETTING_SOURCE_DAEMON_FLAG:
      return "ddod's environment";
    case ddo::v1::SETTING_SOURCE_PRESET:
      return "the preset";
    case ddo::v1::SETTING_SOURCE_COMPONENT_POLICY:
      return "the component policy";
    default:
      return "the default";
  }
}

struct Found {
  std::string value;
  SettingSource source = ddo::v1::SETTING_SOURCE_DEFAULT;
};

// The layers of one resolution, highest first.
class Layers {
 public:
  Layers(const ddo::v1::ResolveSettingsRequest& request,
         const std::map<std::string, std::string>& daemon, const PresetDefinition* preset)
      : request_(request), daemon_(daemon), preset_(preset) {}

  // The first layer that has `name`; with `skip_empty`, empty values move on.
  std::optional<Found> Find(const std::string& name, bool skip_empty) const {
    auto usable = [&](const std::string& value) { return !skip_empty || !value.empty(); };
    if (auto it = request_.overrides().find(name); it != request_.overrides().end() && usable(it->second)) {
      return Found{it->second, ddo::v1::SETTING_SOURCE_REQUEST};
    }
    if (auto it = request_.environment().find(name);
        it != request_.environment().end() && usable(it->second)) {
      return Found{it->second, ddo::v1::SETTING_SOURCE_ENVIRONMENT};
    }
    if (auto it = daemon_.find(name); it != daemon_.end() && usable(it->second)) {
      return Found{it->second, ddo::v1::SETTING_SOURCE_DAEMON_FLAG};
    }
    if (preset_ != nullptr) {
      if (std::optional<std::string> value = preset_->Find(name); value && usable(*value)) {
        return Found{*value, ddo::v1::SETTING_SOURCE_PRESET};
      }
    }
    return std::nullopt;
  }

  // Every name with `prefix` in any layer.
  std::set<std::string> NamesWithPrefix(absl::string_view prefix) const {
    std::set<std::string> names;
    for (const auto& [name, value] : request_.overrides()) if (absl::StartsWith(name, prefix)) names.insert(name);
    for (const auto& [name, value] : request_.environment()) if (absl::StartsWith(name, prefix)) names.insert(name);
    for (const auto& [name, value] : daemon_) if (absl::StartsWith(name, prefix)) names.insert(name);
    if (preset_ != nullptr) {
      for (const auto& [name, value] : preset_->values) if (absl::StartsWith(name, prefix)) names.insert(name);
    }
    return names;
  }

 private:
  const ddo::v1::ResolveSettingsRequest& request_;
  const std::map<std::string, std::string>& daemon_;
  const PresetDefinition* preset_;
};

absl::StatusOr<std::string> Normalize(const SettingSpec& spec, const std::string& name,
                                      const Found& found) {
  absl::StatusOr<std::string> value = NormalizeSetting(spec, name, found.value);
  if (!value.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(value.status().message(), " (from ", SourceName(found.source), ")"));
  }
  return value;
}

void Add(google::protobuf::RepeatedPtrField<ddo::v1::SettingValue>* values, std::string name,
         std::string value, SettingSource source) {
  ddo::v1::SettingValue* out = values->Add();
  out->set_name(std::move(name));
  out->set_value(std::move(value));
  out->set_source(source);
}

ddo::v1::SettingValue* FindValue(google::protobuf::RepeatedPtrField<ddo::v1::SettingValue>* values,
                                 absl::string_view name) {
  for (ddo::v1::SettingValue& value : *values) {
    if (value.name() == name) return &value;
  }
  return nullptr;
}

// The seed's component-policy lookup: the component under its name, lowercased, its prefix
// and the prefix lowercased; the setting as its lowercase name, as given, uppercase, and
// lowercase with '-' for '_'.
std::optional<std::string> PolicyValue(const ddo::v1::ResolveSettingsRequest& request,
                                       const std::string& component, const std::string& prefix,
                                       const std::string& suffix) {
  const auto& policies = request.component_policies();
  for (const std::string& key : {component, absl::AsciiStrToLower(component), prefix,
                                 absl::AsciiStrToLower(prefix)}) {
    auto policy = policies.find(key);
    if (policy == policies.end()) continue;
    const std::string lower = absl::AsciiStrToLower(suffix);
    for (const std::string& name : {lower, suffix, absl::AsciiStrToUpper(suffix),
                                    absl::StrReplaceAll(lower, {{"_", "-"}})}) {
      auto value = policy->second.values().find(name);
      if (value != policy->second.values().end() && !value->second.empty()) return value->second;
    }
  }
  return std::nullopt;
}

absl::Status ResolveComponent(const ddo::v1::ResolveSettingsRequest& request,
                              const Layers& layers, const std::string& component, bool enabled,
                              bool wsl_without_pinning, ddo::v1::ComponentSettings* out) {
  out->set_component(component);
  const std::string prefix = ComponentPrefix(component);
  out->set_variable_prefix(absl::StrCat("DDO_", prefix, "_"));
  std::map<std::string, std::string> resolved;
  for (const SettingSpec& spec : ComponentSettings()) {
    const std::string variable = absl::StrCat("DDO_", prefix, "_", spec.name);
    const std::string runner = absl::StrCat("DDO_RUNNER_", prefix, "_", spec.name);
    std::optional<Found> found;
    std::string name = variable;
    if (auto it = request.overrides().find(variable);
        it != request.overrides().end() && !it->second.empty()) {
      found = Found{it->second, ddo::v1::SETTING_SOURCE_REQUEST};
    } else if (std::optional<std::string> policy = PolicyValue(request, component, prefix, spec.name)) {
      found = Found{*policy, ddo::v1::SETTING_SOURCE_COMPONENT_POLICY};
      name = absl::StrCat("component_policies[", component, "].", absl::AsciiStrToLower(spec.name));
    } else if ((found = layers.Find(variable, /*skip_empty=*/true))) {
    } else if ((found = layers.Find(runner, /*skip_empty=*/true))) {
      name = runner;
    }
    std::string value;
    SettingSource source = ddo::v1::SETTING_SOURCE_DEFAULT;
    if (found) {
      DDO_ASSIGN_OR_RETURN(value, Normalize(spec, name, *found));
      source = found->source;
    } else {
      value = spec.default_value;
    }
    resolved[spec.name] = value;
    Add(out->mutable_values(), variable, value, source);
  }

  // The route the seed's enable_offload takes for "auto" (research/seed-ddo.md §2.5).
  ddo::v1::SettingValue* route = FindValue(out->mutable_values(), absl::StrCat("DDO_", prefix, "_ROUTE"));
  if (route->value() == "auto") {
    const bool dynamic = resolved["DYNAMIC_OFFLOAD"].empty() ? enabled
                                                             : resolved["DYNAMIC_OFFLOAD"] == "1";
    route->set_value(resolved["GROUP_OFFLOAD"] == "1" ? "diffusers_group_offload"
                     : dynamic                        ? "dynamic_offload"
                                                      : "none");
  }
  // WSL: group offload without streams when pinning is disabled there.
  if (route->value() == "diffusers_group_offload" && wsl_without_pinning &&
      resolved["OFFLOAD_STREAM"] == "1") {
    for (const char* suffix : {"_OFFLOAD_STREAM", "_OFFLOAD_RECORD_STREAM"}) {
      ddo::v1::SettingValue* stream = FindValue(out->mutable_values(), absl::StrCat("DDO_", prefix, suffix));
      stream->set_value("0");
      stream->set_source(ddo::v1::SETTING_SOURCE_PLATFORM);
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ddo::v1::ResolvedSettings> ResolveSettings(
    const ddo::v1::ResolveSettingsRequest& request,
    const std::map<std::string, std::string>& daemon_environment, const PlatformFacts& platform) {
  ddo::v1::ResolvedSettings resolved;
  std::string requested = request.preset();
  if (auto it = request.environment().find("DDO_PRESET");
      it != request.environment().end() && !absl::StripAsciiWhitespace(it->second).empty()) {
    requested = it->second;
  }
  requested = std::string(absl::StripAsciiWhitespace(requested));
  resolved.set_requested_preset(requested);
  const PresetDefinition* preset = nullptr;
  if (!requested.empty()) {
    absl::StatusOr<const PresetDefinition*> found = ResolvePreset(requested);
    if (!found.ok()) {
      // The seed's wording: the variable, the value, the choices.
      return absl::InvalidArgumentError(absl::StrCat("Invalid DDO_PRESET='", requested, "': ",
                                                     found.status().message()));
    }
    preset = *found;
    resolved.set_effective_preset(preset->name);
  }
  const Layers layers(request, daemon_environment, preset);

  for (const SettingSpec& spec : LibrarySettings()) {
    if (spec.name == "DDO_PRESET") continue;
    if (absl::StrContains(spec.name, "<PHASE>")) {
      for (const std::string& name : layers.NamesWithPrefix("DDO_PURGE_WINDOWS_STANDBY_")) {
        const Found found = *layers.Find(name, /*skip_empty=*/false);
        DDO_ASSIGN_OR_RETURN(std::string value, Normalize(spec, name, found));
        Add(resolved.mutable_values(), name, value, found.source);
      }
      continue;
    }
    if (std::optional<Found> found = layers.Find(spec.name, /*skip_empty=*/false)) {
      DDO_ASSIGN_OR_RETURN(std::string value, Normalize(spec, spec.name, *found));
      Add(resolved.mutable_values(), spec.name, value, found->source);
    } else {
      Add(resolved.mutable_values(), spec.name, spec.default_value, ddo::v1::SETTING_SOURCE_DEFAULT);
    }
  }

  // Platform rules.
  const bool wsl_without_pinning =
      platform.wsl && FindValue(resolved.mutable_values(), "DDO_DISABLE_PIN_ON_WSL")->value() == "1";
  if (wsl_without_pinning) {
    ddo::v1::SettingValue* pin = FindValue(resolved.mutable_values(), "DDO_PIN_CPU_MEMORY");
    if (pin->value() == "1") {
      pin->set_value("0");
      pin->set_source(ddo::v1::SETTING_SOURCE_PLATFORM);
    }
  }

  const bool enabled = FindValue(resolved.mutable_values(), "DDO_PLAN")->value() == "1" ||
                       FindValue(resolved.mutable_values(), "DDO_EXECUTION_MODE")->value() != "plan";
  for (const std::string& component : request.components()) {
    DDO_RETURN_IF_ERROR(ResolveComponent(request, layers, component, enabled, wsl_without_pinning,
                                         resolved.add_components()));
  }
  return resolved;
}

}  // namespace ddo
