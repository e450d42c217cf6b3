// File: daemon/service/settings_proto.h
//
// ResolveSettings between the protocol (ddo.v1.ResolveSettingsRequest, ddo.v1.ResolvedSettings)
// and the policy's plain types (policy/settings_resolver.h).
//
// Thread-safety: pure functions.
#ifndef DDO_DAEMON_SERVICE_SETTINGS_PROTO_H_
#define DDO_DAEMON_SERVICE_SETTINGS_PROTO_H_

#include "daemon/policy/settings_resolver.h"
#include "ddo/v1/settings.pb.h"

namespace ddo {

SettingsRequest FromProto(const ddo::v1::ResolveSettingsRequest& request);
ddo::v1::SettingSource ToProto(SettingSource source);
void ToProto(const ResolvedSettings& resolved, ddo::v1::ResolvedSettings* out);

}  // namespace ddo

#endif  // DDO_DAEMON_SERVICE_SETTINGS_PROTO_H_
