#include "daemon/service/ddo_service.h"

#include "absl/strings/str_cat.h"
#include "daemon/common/logging.h"
#include "daemon/common/version.h"
#include "daemon/config/presets.h"
#include "daemon/platform/system_info.h"
#include "daemon/service/grpc_status.h"
#include "daemon/service/info_builder.h"

namespace ddo {
namespace {

// How often a Connect handler looks at its call while waiting: bounds how long a vanished
// client's lease outlives it.
constexpr absl::Duration kLeasePollInterval = absl::Milliseconds(100);

}  // namespace

void DdoService::BeginShutdown(const std::string& reason) {
  if (shutting_down_.exchange(true)) {
    return;
  }
  Logger("service")->info("refusing new requests: {}", reason);
  leases_.BeginShutdown(reason);
}

absl::Status DdoService::EnterCall() {
  in_flight_.fetch_add(1);
  if (shutting_down_.load()) {
    return absl::UnavailableError("ddod is shutting down");
  }
  return absl::OkStatus();
}

grpc::Status DdoService::Finish(const char* method, const absl::Status& status) {
  in_flight_.fetch_sub(1);
  counters_.Record(method, status.ok());
  if (!status.ok()) {
    Logger("service")->debug("{} -> {}", method, status.ToString());
  }
  return ToGrpcStatus(status);
}

grpc::Status DdoService::NotYet(const char* method, const char* capability) {
  if (absl::Status serving = EnterCall(); !serving.ok()) {
    return Finish(method, serving);
  }
  return Finish(method, absl::UnimplementedError(absl::StrCat(
                            method, " is not implemented in ddod ", kVersion, " yet (",
                            capability, "); see docs/protocol.md")));
}

grpc::Status DdoService::GetInfo(grpc::ServerContext*, const ddo::v1::GetInfoRequest*,
                                 ddo::v1::DaemonInfo* response) {
  if (absl::Status serving = EnterCall(); !serving.ok()) {
    return Finish("GetInfo", serving);
  }
  *response = BuildDaemonInfo(context_, QuerySystemInfo(context_.options.available_ram_override_gb));
  return Finish("GetInfo", absl::OkStatus());
}

grpc::Status DdoService::GetStats(grpc::ServerContext*, const ddo::v1::GetStatsRequest*,
                                  ddo::v1::Stats* response) {
  if (absl::Status serving = EnterCall(); !serving.ok()) {
    return Finish("GetStats", serving);
  }
  response->set_uptime_seconds(absl::ToDoubleSeconds(absl::Now() - context_.started));
  response->set_leases(static_cast<uint32_t>(leases_.size()));
  response->mutable_pool()->set_budget_bytes(context_.ram_budget_bytes);
  for (const auto& [method, count] : counters_.Snapshot()) {
    auto* rpc = response->add_rpcs();
    rpc->set_method(method);
    rpc->set_ok(count.ok);
    rpc->set_failed(count.failed);
  }
  return Finish("GetStats", absl::OkStatus());
}

grpc::Status DdoService::ListPresets(grpc::ServerContext*, const ddo::v1::ListPresetsRequest*,
                                     ddo::v1::ListPresetsResponse* response) {
  if (absl::Status serving = EnterCall(); !serving.ok()) {
    return Finish("ListPresets", serving);
  }
  for (const PresetDefinition& definition : AllPresets()) {
    auto* preset = response->add_presets();
    preset->set_name(definition.name);
    preset->set_description(definition.description);
    for (const auto& [variable, value] : definition.values) {
      (*preset->mutable_values())[variable] = value;
    }
  }
  for (const auto& [alias, target] : PresetAliases()) {
    (*response->mutable_aliases())[alias] = target;
  }
  response->set_daemon_preset(context_.options.preset != nullptr ? context_.options.preset->name
                                                                 : "");
  return Finish("ListPresets", absl::OkStatus());
}

grpc::Status DdoService::Connect(grpc::ServerContext* ctx, const ddo::v1::ConnectRequest* request,
                                 grpc::ServerWriter<ddo::v1::ConnectEvent>* writer) {
  if (absl::Status serving = EnterCall(); !serving.ok()) {
    return Finish("Connect", serving);
  }
  absl::StatusOr<Lease> lease = leases_.Open(request->client_pid(), request->client_name());
  if (!lease.ok()) {
    return Finish("Connect", lease.status());
  }
  ddo::v1::ConnectEvent connected;
  connected.mutable_connected()->set_lease_id(lease->id);
  *connected.mutable_connected()->mutable_daemon() =
      BuildDaemonInfo(context_, QuerySystemInfo(context_.options.available_ram_override_gb));
  bool client_there = writer->Write(connected);

  // Hold the lease until the client goes away or ddod stops.
  while (client_there && !ctx->IsCancelled()) {
    if (leases_.WaitForShutdown(kLeasePollInterval)) {
      ddo::v1::ConnectEvent goodbye;
      goodbye.mutable_shutting_down()->set_reason(leases_.shutdown_reason());
      writer->Write(goodbye);
      break;
    }
  }
  leases_.Close(lease->id);
  return Finish("Connect", absl::OkStatus());
}

grpc::Status DdoService::ResolveSettings(grpc::ServerContext*,
                                         const ddo::v1::ResolveSettingsRequest*,
                                         ddo::v1::ResolvedSettings*) {
  return NotYet("ResolveSettings", "settings resolution and the policy");
}

grpc::Status DdoService::ExplainPlan(grpc::ServerContext*, const ddo::v1::ExplainPlanRequest*,
                                     ddo::v1::PlanExplanation*) {
  return NotYet("ExplainPlan", "the planner");
}

grpc::Status DdoService::RegisterComponent(grpc::ServerContext*,
                                           const ddo::v1::RegisterComponentRequest*,
                                           ddo::v1::RegisterComponentResponse*) {
  return NotYet("RegisterComponent", "host pool and component store");
}

grpc::Status DdoService::CommitUpload(grpc::ServerContext*, const ddo::v1::CommitUploadRequest*,
                                      ddo::v1::ComponentInfo*) {
  return NotYet("CommitUpload", "host pool and component store");
}

grpc::Status DdoService::AbortUpload(grpc::ServerContext*, const ddo::v1::AbortUploadRequest*,
                                     ddo::v1::AbortUploadResponse*) {
  return NotYet("AbortUpload", "host pool and component store");
}

grpc::Status DdoService::LoadSafetensors(grpc::ServerContext*,
                                         const ddo::v1::LoadSafetensorsRequest*,
                                         grpc::ServerWriter<ddo::v1::LoadProgress>*) {
  return NotYet("LoadSafetensors", "safetensors loading into the host pool");
}

grpc::Status DdoService::GetComponent(grpc::ServerContext*, const ddo::v1::GetComponentRequest*,
                                      ddo::v1::ComponentInfo*) {
  return NotYet("GetComponent", "host pool and component store");
}

grpc::Status DdoService::ListComponents(grpc::ServerContext*,
                                        const ddo::v1::ListComponentsRequest*,
                                        ddo::v1::ListComponentsResponse*) {
  return NotYet("ListComponents", "host pool and component store");
}

grpc::Status DdoService::EvictComponent(grpc::ServerContext*,
                                        const ddo::v1::EvictComponentRequest*,
                                        ddo::v1::EvictComponentResponse*) {
  return NotYet("EvictComponent", "host pool and component store");
}

grpc::Status DdoService::Attach(grpc::ServerContext*, const ddo::v1::AttachRequest*,
                                ddo::v1::AttachResponse*) {
  return NotYet("Attach", "sessions and GPU streaming");
}

grpc::Status DdoService::Detach(grpc::ServerContext*, const ddo::v1::DetachRequest*,
                                ddo::v1::DetachResponse*) {
  return NotYet("Detach", "sessions and GPU streaming");
}

grpc::Status DdoService::SetSchedule(grpc::ServerContext*, const ddo::v1::SetScheduleRequest*,
                                     ddo::v1::SetScheduleResponse*) {
  return NotYet("SetSchedule", "GPU streaming");
}

grpc::Status DdoService::ListSessions(grpc::ServerContext*, const ddo::v1::ListSessionsRequest*,
                                      ddo::v1::ListSessionsResponse* response) {
  if (absl::Status serving = EnterCall(); !serving.ok()) {
    return Finish("ListSessions", serving);
  }
  for (const Lease& lease : leases_.List()) {
    auto* info = response->add_leases();
    // The full id is its holder's capability; others see a prefix that tells leases apart.
    info->set_lease_id(lease.id.substr(0, 8));
    info->set_client_pid(lease.client_pid);
    info->set_client_name(lease.client_name);
    info->set_connected_unix_ms(absl::ToUnixMillis(lease.connected));
  }
  return Finish("ListSessions", absl::OkStatus());
}

grpc::Status DdoService::Phase(grpc::ServerContext*, const ddo::v1::PhaseRequest*,
                               ddo::v1::PhaseResponse*) {
  return NotYet("Phase", "pipeline phases");
}

grpc::Status DdoService::ListProfiles(grpc::ServerContext*, const ddo::v1::ListProfilesRequest*,
                                      ddo::v1::ListProfilesResponse*) {
  return NotYet("ListProfiles", "capacity profiles");
}

grpc::Status DdoService::GetProfile(grpc::ServerContext*, const ddo::v1::GetProfileRequest*,
                                    ddo::v1::Profile*) {
  return NotYet("GetProfile", "capacity profiles");
}

grpc::Status DdoService::PutProfile(grpc::ServerContext*, const ddo::v1::PutProfileRequest*,
                                    ddo::v1::Profile*) {
  return NotYet("PutProfile", "capacity profiles");
}

grpc::Status DdoService::DeleteProfile(grpc::ServerContext*,
                                       const ddo::v1::DeleteProfileRequest*,
                                       ddo::v1::DeleteProfileResponse*) {
  return NotYet("DeleteProfile", "capacity profiles");
}

}  // namespace ddo
