// File: daemon/service/request_limits.h
//
// Bounds on every request ddod takes, checked before a handler does any work: each string has
// a maximum size, each repeated or map field a maximum count, keys, names, ids and paths hold
// no control characters (bytes below 0x20, 0x7f, NUL), and enum fields hold a known value.
// A shared ddod trusted every caller: four 20 MiB cache keys broke ListComponents for every
// client and grew the manifest to 84 MB and the log to 262 MB (issue 13).
//
// Status codes: a count over its limit is RESOURCE_EXHAUSTED (as gRPC's own message-size
// limit); every other refusal is INVALID_ARGUMENT. Messages name the field
// ("AttachRequest.settings['DDO_X']", "RegisterComponentRequest.tensors[17].name") and the
// limit, and show at most a short escaped prefix (display_text.h) of an offending string.
//
// Thread-safety: pure functions, safe from any thread.
#ifndef DDO_DAEMON_SERVICE_REQUEST_LIMITS_H_
#define DDO_DAEMON_SERVICE_REQUEST_LIMITS_H_

#include <cstddef>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "ddo/v1/components.pb.h"
#include "ddo/v1/info.pb.h"
#include "ddo/v1/profiles.pb.h"
#include "ddo/v1/sessions.pb.h"
#include "ddo/v1/settings.pb.h"
#include "ddo/v1/stats.pb.h"

namespace ddo {

// --- Strings (bytes) ---
// A component's cache key (model id + revision + subfolder + dtype, as the client builds it).
inline constexpr size_t kMaxCacheKeyBytes = 512;
// ConnectRequest.client_name.
inline constexpr size_t kMaxClientNameBytes = 128;
// A tensor name, a module path (TensorSpec.name, .module_path, streamable names, unit keys);
// the same bound as the patterns are matched against (module_patterns.h).
inline constexpr size_t kMaxTensorNameBytes = 1024;
// TensorSpec.module_class ("Linear", "torch.nn.modules.linear.Linear").
inline constexpr size_t kMaxModuleClassBytes = 256;
// Ids ddod hands out (lease, upload, session ids) and device names ("GPU-<uuid>", "cuda:0").
inline constexpr size_t kMaxIdBytes = 128;
// A content hash ("xxh3-64:<16 hex>").
inline constexpr size_t kMaxHashBytes = 128;
// A setting's name (DDO_* variable, component policy key) and value.
inline constexpr size_t kMaxSettingNameBytes = 128;
inline constexpr size_t kMaxSettingValueBytes = 4096;
// A component name ("transformer", "text_encoder_2") and a preset name.
inline constexpr size_t kMaxComponentNameBytes = 256;
inline constexpr size_t kMaxPresetNameBytes = 128;
// A file's base name (the identity socket's FILE message) and a path (PATH_MAX).
inline constexpr size_t kMaxFileNameBytes = 255;
inline constexpr size_t kMaxPathBytes = 4096;
// A profile key is 24 lowercase hex digits (profile_store.h checks the form); a named
// profile's name; a profile's JSON text.
inline constexpr size_t kMaxProfileKeyBytes = 24;
inline constexpr size_t kMaxProfileNameBytes = 256;
inline constexpr size_t kMaxProfileJsonBytes = size_t{1} << 20;

// --- Counts ---
// Tensors of a component (TensorSpec lists, streamable names, LoadSafetensors units).
inline constexpr size_t kMaxTensors = 1000000;
// Dimensions of one tensor.
inline constexpr size_t kMaxTensorRank = 64;
// Entries of one settings map (request settings, environment, overrides, a component policy).
inline constexpr size_t kMaxSettingsEntries = 256;
// Components named in one ResolveSettings call (components, component_policies).
inline constexpr size_t kMaxComponents = 256;
// Files (paths or passed descriptors) of one LoadSafetensors call.
inline constexpr size_t kMaxFiles = 4096;
inline constexpr size_t kMaxFileHandles = 4096;
// Cache keys in one PhaseRequest list (needed, prefetch).
inline constexpr size_t kMaxPhaseComponents = 4096;
// Unit uses in one SetScheduleRequest.unit_order.
inline constexpr size_t kMaxScheduleUses = 1000000;

// The identity socket's FILE <name>: a base name (no '/', not "." or ".."), 1 to
// kMaxFileNameBytes bytes, no control characters.
absl::Status CheckFileName(absl::string_view name);

// One overload per request of ddo.v1.Ddo.
absl::Status CheckRequest(const ddo::v1::GetInfoRequest& request);
absl::Status CheckRequest(const ddo::v1::GetStatsRequest& request);
absl::Status CheckRequest(const ddo::v1::ListPresetsRequest& request);
absl::Status CheckRequest(const ddo::v1::ResolveSettingsRequest& request);
absl::Status CheckRequest(const ddo::v1::ExplainPlanRequest& request);
absl::Status CheckRequest(const ddo::v1::ConnectRequest& request);
absl::Status CheckRequest(const ddo::v1::RegisterComponentRequest& request);
absl::Status CheckRequest(const ddo::v1::CommitUploadRequest& request);
absl::Status CheckRequest(const ddo::v1::AbortUploadRequest& request);
absl::Status CheckRequest(const ddo::v1::LoadSafetensorsRequest& request);
absl::Status CheckRequest(const ddo::v1::GetComponentRequest& request);
absl::Status CheckRequest(const ddo::v1::ListComponentsRequest& request);
absl::Status CheckRequest(const ddo::v1::EvictComponentRequest& request);
absl::Status CheckRequest(const ddo::v1::AttachRequest& request);
absl::Status CheckRequest(const ddo::v1::DetachRequest& request);
absl::Status CheckRequest(const ddo::v1::SetScheduleRequest& request);
absl::Status CheckRequest(const ddo::v1::ListSessionsRequest& request);
// PHASE_KIND_UNSPECIFIED passes (the handler explains it); values outside PhaseKind do not.
absl::Status CheckRequest(const ddo::v1::PhaseRequest& request);
absl::Status CheckRequest(const ddo::v1::ListProfilesRequest& request);
absl::Status CheckRequest(const ddo::v1::GetProfileRequest& request);
absl::Status CheckRequest(const ddo::v1::PutProfileRequest& request);
absl::Status CheckRequest(const ddo::v1::DeleteProfileRequest& request);

}  // namespace ddo

#endif  // DDO_DAEMON_SERVICE_REQUEST_LIMITS_H_
