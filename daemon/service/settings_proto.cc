// File: daemon/service/settings_proto.cc
#include "daemon/service/settings_proto.h"

namespace ddo {
namespace {

void ToProto(const SettingValue& value, ddo::v1::SettingValue* out) {
  out->set_name(value.name);
  out->set_value(value.value);
  out->set_source(ToProto(value.source));
}

}  // namespace

SettingsRequest FromProto(const ddo::v1::ResolveSettingsRequest& request) {
  SettingsRequest out;
  out.preset = request.preset();
  out.environment.insert(request.environment().begin(), request.environment().end());
  out.overrides.insert(request.overrides().begin(), request.overrides().end());
  out.components.assign(request.components().begin(), request.components().end());
  for (const auto& [component, policy] : request.component_policies()) {
    out.component_policies[component].insert(policy.values().begin(), policy.values().end());
  }
  return out;
}

ddo::v1::SettingSource ToProto(SettingSource source) {
  switch (source) {
    case SettingSource::kDefault:
      return ddo::v1::SETTING_SOURCE_DEFAULT;
    case SettingSource::kPreset:
      return ddo::v1::SETTING_SOURCE_PRESET;
    case SettingSource::kDaemon:
      return ddo::v1::SETTING_SOURCE_DAEMON_FLAG;
    case SettingSource::kEnvironment:
      return ddo::v1::SETTING_SOURCE_ENVIRONMENT;
    case SettingSource::kRequest:
      return ddo::v1::SETTING_SOURCE_REQUEST;
    case SettingSource::kComponentPolicy:
      return ddo::v1::SETTING_SOURCE_COMPONENT_POLICY;
    case SettingSource::kPlatform:
      return ddo::v1::SETTING_SOURCE_PLATFORM;
  }
  return ddo::v1::SETTING_SOURCE_UNSPECIFIED;
}

void ToProto(const ResolvedSettings& resolved, ddo::v1::ResolvedSettings* out) {
  out->set_requested_preset(resolved.requested_preset);
  out->set_effective_preset(resolved.effective_preset);
  for (const SettingValue& value : resolved.values) ToProto(value, out->add_values());
  for (const ResolvedComponent& component : resolved.components) {
    ddo::v1::ComponentSettings* settings = out->add_components();
    settings->set_component(component.component);
    settings->set_variable_prefix(component.variable_prefix);
    for (const SettingValue& value : component.values) ToProto(value, settings->add_values());
  }
}

}  // namespace ddo
