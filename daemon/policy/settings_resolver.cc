// File: daemon/policy/settings_resolver.cc
#include "daemon/policy/settings_resolver.h"

#include <cstdlib>
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

const char* SourceName(SettingSource source) {
  switch (source) {
    case SettingSource::kRequest:
      return "the request's overrides";
    case SettingSource::kEnvironment:
      return "the client's environment";
    case SettingSource::kDaemon:
      return "ddod's environment";
    case SettingSource::kPreset:
      return "the preset";
    case SettingSource::kComponentPolicy:
      return "the component policy";
    case SettingSource::kPlatform:
      return "a platform rule";
    case SettingSource::kDefault:
      break;
  }
  return "the default";
}

struct Found {
  std::string value;
  SettingSource source = SettingSource::kDefault;
};

// The layers of one resolution, highest first.
class Layers {
 public:
  Layers(const SettingsRequest& request,
         const std::map<std::string, std::string>& daemon, const PresetDefinition* preset)
      : request_(request), daemon_(daemon), preset_(preset) {}

  // The first layer that has `name`; with `skip_empty`, empty values move on.
  std::optional<Found> Find(const std::string& name, bool skip_empty) const {
    auto usable = [&](const std::string& value) { return !skip_empty || !value.empty(); };
    if (auto it = request_.overrides.find(name); it != request_.overrides.end() && usable(it->second)) {
      return Found{it->second, SettingSource::kRequest};
    }
    if (auto it = request_.environment.find(name);
        it != request_.environment.end() && usable(it->second)) {
      return Found{it->second, SettingSource::kEnvironment};
    }
    if (auto it = daemon_.find(name); it != daemon_.end() && usable(it->second)) {
      return Found{it->second, SettingSource::kDaemon};
    }
    if (preset_ != nullptr) {
      if (std::optional<std::string> value = preset_->Find(name); value && usable(*value)) {
        return Found{*value, SettingSource::kPreset};
      }
    }
    return std::nullopt;
  }

  // Every name with `prefix` in any layer.
  std::set<std::string> NamesWithPrefix(absl::string_view prefix) const {
    std::set<std::string> names;
    for (const auto& [name, value] : request_.overrides) if (absl::StartsWith(name, prefix)) names.insert(name);
    for (const auto& [name, value] : request_.environment) if (absl::StartsWith(name, prefix)) names.insert(name);
    for (const auto& [name, value] : daemon_) if (absl::StartsWith(name, prefix)) names.insert(name);
    if (preset_ != nullptr) {
      for (const auto& [name, value] : preset_->values) if (absl::StartsWith(name, prefix)) names.insert(name);
    }
    return names;
  }

 private:
  const SettingsRequest& request_;
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

void Add(std::vector<SettingValue>& values, std::string name, std::string value,
         SettingSource source) {
  values.push_back({std::move(name), std::move(value), source});
}

// The value named `name`, which the resolution added.
SettingValue& ValueNamed(std::vector<SettingValue>& values, absl::string_view name) {
  for (SettingValue& value : values) {
    if (value.name == name) return value;
  }
  // Every name looked up here is a catalog setting the resolution always adds.
  std::abort();
}

// The seed's component-policy lookup: the component under its name, lowercased, its prefix
// and the prefix lowercased; the setting as its lowercase name, as given, uppercase, and
// lowercase with '-' for '_'.
std::optional<std::string> PolicyValue(const SettingsRequest& request,
                                       const std::string& component, const std::string& prefix,
                                       const std::string& suffix) {
  const auto& policies = request.component_policies;
  for (const std::string& key : {component, absl::AsciiStrToLower(component), prefix,
                                 absl::AsciiStrToLower(prefix)}) {
    auto policy = policies.find(key);
    if (policy == policies.end()) continue;
    const std::string lower = absl::AsciiStrToLower(suffix);
    for (const std::string& name : {lower, suffix, absl::AsciiStrToUpper(suffix),
                                    absl::StrReplaceAll(lower, {{"_", "-"}})}) {
      auto value = policy->second.find(name);
      if (value != policy->second.end() && !value->second.empty()) return value->second;
    }
  }
  return std::nullopt;
}

absl::StatusOr<ResolvedComponent> ResolveComponent(const SettingsRequest& request,
                                                   const Layers& layers,
                                                   const std::string& component, bool enabled,
                                                   bool wsl_without_pinning) {
  ResolvedComponent out;
  out.component = component;
  const std::string prefix = ComponentPrefix(component);
  out.variable_prefix = absl::StrCat("DDO_", prefix, "_");
  std::map<std::string, std::string> resolved;
  for (const SettingSpec& spec : ComponentSettings()) {
    const std::string variable = absl::StrCat("DDO_", prefix, "_", spec.name);
    const std::string runner = absl::StrCat("DDO_RUNNER_", prefix, "_", spec.name);
    std::optional<Found> found;
    std::string name = variable;
    if (auto it = request.overrides.find(variable);
        it != request.overrides.end() && !it->second.empty()) {
      found = Found{it->second, SettingSource::kRequest};
    } else if (std::optional<std::string> policy = PolicyValue(request, component, prefix, spec.name)) {
      found = Found{*policy, SettingSource::kComponentPolicy};
      name = absl::StrCat("component_policies[", component, "].", absl::AsciiStrToLower(spec.name));
    } else if ((found = layers.Find(variable, /*skip_empty=*/true))) {
    } else if ((found = layers.Find(runner, /*skip_empty=*/true))) {
      name = runner;
    }
    std::string value;
    SettingSource source = SettingSource::kDefault;
    if (found) {
      DDO_ASSIGN_OR_RETURN(value, Normalize(spec, name, *found));
      source = found->source;
    } else {
      value = spec.default_value;
    }
    resolved[spec.name] = value;
    Add(out.values, variable, value, source);
  }

  // The route the seed's enable_offload takes for "auto" (docs/seed.md, "The route for auto").
  SettingValue& route = ValueNamed(out.values, absl::StrCat("DDO_", prefix, "_ROUTE"));
  if (route.value == "auto") {
    const bool dynamic = resolved["DYNAMIC_OFFLOAD"].empty() ? enabled
                                                             : resolved["DYNAMIC_OFFLOAD"] == "1";
    route.value = resolved["GROUP_OFFLOAD"] == "1" ? "diffusers_group_offload"
                  : dynamic                        ? "dynamic_offload"
                                                   : "none";
  }
  // WSL: group offload without streams when pinning is disabled there.
  if (route.value == "diffusers_group_offload" && wsl_without_pinning &&
      resolved["OFFLOAD_STREAM"] == "1") {
    for (const char* suffix : {"_OFFLOAD_STREAM", "_OFFLOAD_RECORD_STREAM"}) {
      SettingValue& stream = ValueNamed(out.values, absl::StrCat("DDO_", prefix, suffix));
      stream.value = "0";
      stream.source = SettingSource::kPlatform;
    }
  }
  return out;
}

}  // namespace

std::map<std::string, std::string> ResolvedSettings::ValuesByName(size_t component_index) const {
  std::map<std::string, std::string> by_name;
  for (const SettingValue& value : values) by_name[value.name] = value.value;
  if (component_index < components.size()) {
    for (const SettingValue& value : components[component_index].values) {
      by_name[value.name] = value.value;
    }
  }
  return by_name;
}

absl::StatusOr<ResolvedSettings> ResolveSettings(
    const SettingsRequest& request, const std::map<std::string, std::string>& daemon_environment,
    const PlatformFacts& platform) {
  ResolvedSettings resolved;
  std::string requested = request.preset;
  if (auto it = request.environment.find("DDO_PRESET");
      it != request.environment.end() && !absl::StripAsciiWhitespace(it->second).empty()) {
    requested = it->second;
  }
  requested = std::string(absl::StripAsciiWhitespace(requested));
  resolved.requested_preset = requested;
  const PresetDefinition* preset = nullptr;
  if (!requested.empty()) {
    absl::StatusOr<const PresetDefinition*> found = ResolvePreset(requested);
    if (!found.ok()) {
      // The seed's wording: the variable, the value, the choices.
      return absl::InvalidArgumentError(absl::StrCat("Invalid DDO_PRESET='", requested, "': ",
                                                     found.status().message()));
    }
    preset = *found;
    resolved.effective_preset = preset->name;
  }
  const Layers layers(request, daemon_environment, preset);

  for (const SettingSpec& spec : LibrarySettings()) {
    if (spec.name == "DDO_PRESET") continue;
    if (absl::StrContains(spec.name, "<PHASE>")) {
      for (const std::string& name : layers.NamesWithPrefix("DDO_PURGE_WINDOWS_STANDBY_")) {
        const Found found = *layers.Find(name, /*skip_empty=*/false);
        DDO_ASSIGN_OR_RETURN(std::string value, Normalize(spec, name, found));
        Add(resolved.values, name, value, found.source);
      }
      continue;
    }
    if (std::optional<Found> found = layers.Find(spec.name, /*skip_empty=*/false)) {
      DDO_ASSIGN_OR_RETURN(std::string value, Normalize(spec, spec.name, *found));
      Add(resolved.values, spec.name, value, found->source);
    } else {
      Add(resolved.values, spec.name, spec.default_value, SettingSource::kDefault);
    }
  }

  // Platform rules.
  const bool wsl_without_pinning =
      platform.wsl && ValueNamed(resolved.values, "DDO_DISABLE_PIN_ON_WSL").value == "1";
  if (wsl_without_pinning) {
    SettingValue& pin = ValueNamed(resolved.values, "DDO_PIN_CPU_MEMORY");
    if (pin.value == "1") {
      pin.value = "0";
      pin.source = SettingSource::kPlatform;
    }
  }

  const bool enabled = ValueNamed(resolved.values, "DDO_PLAN").value == "1" ||
                       ValueNamed(resolved.values, "DDO_EXECUTION_MODE").value != "plan";
  for (const std::string& component : request.components) {
    DDO_ASSIGN_OR_RETURN(ResolvedComponent settings,
                         ResolveComponent(request, layers, component, enabled, wsl_without_pinning));
    resolved.components.push_back(std::move(settings));
  }
  return resolved;
}

}  // namespace ddo
