#include <unistd.h>

#include <optional>

#include "daemon/common/format_bytes.h"
#include "daemon/config/environment.h"
#include "daemon/profiles/profile_store.h"
#include "daemon/service/ddo_service.h"

#include "daemon/policy/plan_explainer.h"
#include "daemon/policy/settings_resolver.h"
#include "daemon/policy/standby_purge.h"
#include "daemon/policy/stream_planning.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "daemon/common/logging.h"
#include "daemon/common/status_macros.h"
#include "daemon/common/version.h"
#include "daemon/config/presets.h"
#include "daemon/platform/system_info.h"
#include "daemon/service/component_proto.h"
#include "daemon/service/grpc_status.h"
#include "daemon/service/info_builder.h"
#include "daemon/service/request_limits.h"
#include "daemon/service/settings_proto.h"
#include "daemon/service/stream_opener.h"
#include "daemon/service/stream_proto.h"
#include "daemon/service/tensor_proto.h"
#include "daemon/store/segment_grants.h"
#include "daemon/stream/session_grants.h"

namespace ddo {
namespace {

// Writes one progress message (bytes_done of bytes_total) of a progress-streaming call.
template <typename Progress>
std::function<void(uint64_t, uint64_t)> ProgressWriter(grpc::ServerWriter<Progress>* writer) {
  return [writer](uint64_t done, uint64_t total) {
    Progress message;
    message.set_bytes_done(done);
    message.set_bytes_total(total);
    writer->Write(message);
  };
}

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

absl::Status DdoService::ReleaseIfLeaseEnded(const Lease& lease) {
  if (leases_.Find(lease.id).ok()) {
    return absl::OkStatus();
  }
  // The lease ended while the request ran: what the request created belongs to nobody.
  sessions_.ReleaseLease(lease.id);
  return absl::AbortedError(absl::StrCat("lease ", lease.id.substr(0, 8), " ended meanwhile"));
}

DdoService::Call::Call(DdoService& service, const char* method)
    : service_(service), method_(method), began_(absl::Now()) {
  service_.in_flight_.fetch_add(1);
}

DdoService::Call::~Call() {
  if (!finished_) {
    // A handler that left without Finish (an exception): counted as failed, never leaked.
    service_.counters_.Record(method_, /*ok=*/false, absl::Now() - began_);
  }
  if (counted_uid_.has_value()) service_.calls_.Leave(*counted_uid_);
  service_.in_flight_.fetch_sub(1);
}

absl::Status DdoService::Call::Serving() const {
  if (service_.shutting_down_.load()) return absl::UnavailableError("ddod is shutting down");
  return absl::OkStatus();
}

absl::StatusOr<Caller> DdoService::Call::Enter(grpc::ServerContext* ctx, bool lease_stream) {
  DDO_RETURN_IF_ERROR(Serving());
  const std::string token = TokenOf(ctx);
  if (token.empty()) {
    return absl::UnauthenticatedError(absl::StrCat(
        "no ddo-token: a caller proves who it is on ddod's identity socket ",
        service_.context_.identity_socket, " first (docs/security.md)"));
  }
  DDO_ASSIGN_OR_RETURN(Caller caller, service_.callers_.Find(token));
  if (lease_stream) {
    timed_ = false;  // a lease lasts as long as its client: not a latency
  } else {
    DDO_RETURN_IF_ERROR(service_.calls_.Enter(caller.uid, !caller.admin));
    counted_uid_ = caller.uid;
  }
  return caller;
}

grpc::Status DdoService::Call::Finish(const absl::Status& status) {
  finished_ = true;
  service_.counters_.Record(method_, status.ok(),
                            timed_ ? absl::Now() - began_ : absl::InfiniteDuration());
  if (!status.ok()) {
    Logger("service")->debug("{} -> {}", method_, status.ToString());
  }
  return ToGrpcStatus(status);
}

absl::Status DdoService::CheckGpuSessionAllowed(const std::string& device,
                                                const Caller& caller) {
  const bool host_backend = device == "cpu" || absl::StartsWith(device, "cpu:");
  if (host_backend || caller.uid == ::geteuid() || caller.uid == 0) return absl::OkStatus();
  // CUDA keeps a process's interprocess events in a 0600 /dev/shm/cuda.shm.* file of its own:
  // another user's runner cannot open them (cuIpcOpenEventHandle: CUDA_ERROR_MAP_FAILED,
  // bench/probes/ipc_cross_user.py), and opening that file to a group would let every member
  // tamper with every session's ordering. Refused here, with the way out, rather than failing
  // inside the runner.
  return absl::FailedPreconditionError(absl::StrCat(
      "ddod runs as uid ", ::geteuid(), " and streams on a GPU only for its own user: CUDA's "
      "interprocess events cannot be opened by another user. Run a per-user ddod "
      "(deploy/systemd/ddod-user.service), or stream on the host backend (device cpu); "
      "host attaches of the shared copy work for every group member (docs/security.md)"));
}

std::function<bool()> DdoService::CancelledFor(grpc::ServerContext* ctx,
                                              const std::string& lease_id) {
  return [this, ctx, lease_id] {
    return ctx->IsCancelled() || shutting_down_.load() || !leases_.Find(lease_id).ok();
  };
}

std::string DdoService::TokenOf(grpc::ServerContext* ctx) {
  const auto& metadata = ctx->client_metadata();
  auto it = metadata.find("ddo-token");
  if (it == metadata.end()) return "";
  return std::string(it->second.data(), it->second.size());
}

grpc::Status DdoService::GetInfo(grpc::ServerContext*, const ddo::v1::GetInfoRequest*,
                                 ddo::v1::DaemonInfo* response) {
  Call call(*this, "GetInfo");
  if (absl::Status serving = call.Serving(); !serving.ok()) {
    return call.Finish(serving);
  }
  *response = BuildDaemonInfo(context_, QuerySystemInfo(context_.options.available_ram_override_gb,
                                                        context_.options.platform_override));
  return call.Finish(absl::OkStatus());
}

grpc::Status DdoService::GetStats(grpc::ServerContext* ctx, const ddo::v1::GetStatsRequest*,
                                  ddo::v1::Stats* response) {
  return HandleEntered("GetStats", ctx, [&](const Caller&) -> absl::Status {
    response->set_uptime_seconds(absl::ToDoubleSeconds(absl::Now() - context_.started));
    response->set_leases(static_cast<uint32_t>(leases_.size()));
    const PoolUsage usage = pool_.Usage();
    const StoreStats store = store_.Stats();
    response->set_sessions(store.sessions);
    auto* pool = response->mutable_pool();
    pool->set_budget_bytes(usage.budget_bytes);
    pool->set_reserved_bytes(usage.reserved_bytes);
    pool->set_pinned_bytes(usage.pinned_bytes);
    pool->set_used_bytes(store.used_bytes);
    pool->set_segments(usage.segments);
    pool->set_components(store.components);
    pool->set_evictions(store.evictions);
    pool->set_adopted(store.adopted);
    pool->set_file_bytes(store.file_bytes);
    pool->set_backing_files(store.backing_files);
    pool->set_held_bytes(usage.held_bytes);
    pool->set_outside_bytes(usage.outside_bytes);
    pool->set_spilled_bytes(store.spilled_bytes);
    pool->set_prefaulted_bytes(usage.reserve_bytes);
    pool->set_prefaulted_ready_bytes(store.prefaulted_ready_bytes);
    for (const auto& [method, count] : counters_.Snapshot()) {
      auto* rpc = response->add_rpcs();
      rpc->set_method(method);
      rpc->set_ok(count.ok);
      rpc->set_failed(count.failed);
      rpc->set_timed(count.timed);
      rpc->set_seconds_sum(count.seconds);
      for (uint64_t at_most : count.at_most) rpc->add_at_most(at_most);
    }
    const StreamTotals totals = streams_.Totals();
    auto* stream = response->mutable_stream();
    stream->set_sessions_opened(totals.sessions_opened);
    stream->set_bytes_streamed(totals.streamed_bytes);
    stream->set_units_streamed(totals.streamed_units);
    stream->set_slab_bytes_filled(totals.slab_bytes_filled);
    stream->set_warm_slab_hits(totals.warm_slab_hits);
    stream->set_warm_slab_misses(totals.warm_slab_misses);
    stream->set_runner_waits(totals.runner_waits);
    stream->set_file_bytes_read(totals.file_bytes_read);
    stream->set_staging_waits(totals.staging_waits);
    for (double bound : kLatencyBucketsSeconds) response->add_latency_bucket_seconds(bound);
    return absl::OkStatus();
  });
}

grpc::Status DdoService::ListPresets(grpc::ServerContext* ctx, const ddo::v1::ListPresetsRequest*,
                                     ddo::v1::ListPresetsResponse* response) {
  return HandleEntered("ListPresets", ctx, [&](const Caller&) -> absl::Status {
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
    return absl::OkStatus();
  });
}

grpc::Status DdoService::Connect(grpc::ServerContext* ctx, const ddo::v1::ConnectRequest* request,
                                 grpc::ServerWriter<ddo::v1::ConnectEvent>* writer) {
  Call call(*this, "Connect");
  absl::StatusOr<Caller> caller = call.Admit(ctx, *request, /*lease_stream=*/true);
  if (!caller.ok()) return call.Finish(caller.status());
  // The pid is the kernel's (the identity socket's peer), not request->client_pid().
  absl::StatusOr<Lease> lease = leases_.Open(*caller, request->client_name());
  if (!lease.ok()) {
    return call.Finish(lease.status());
  }
  ddo::v1::ConnectEvent connected;
  connected.mutable_connected()->set_lease_id(lease->id);
  *connected.mutable_connected()->mutable_daemon() =
      BuildDaemonInfo(context_, QuerySystemInfo(context_.options.available_ram_override_gb,
                                                context_.options.platform_override));
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
  sessions_.ReleaseLease(lease->id);
  return call.Finish(absl::OkStatus());
}

grpc::Status DdoService::ResolveSettings(grpc::ServerContext* ctx,
                                         const ddo::v1::ResolveSettingsRequest* request,
                                         ddo::v1::ResolvedSettings* response) {
  constexpr char kMethod[] = "ResolveSettings";
  return Handle(kMethod, ctx, *request, [&](const Caller&) -> absl::Status {
    absl::StatusOr<ddo::ResolvedSettings> resolved =
        ddo::ResolveSettings(FromProto(*request), *context_.SettingLayer(), Platform());
    if (!resolved.ok()) return resolved.status();
    ToProto(*resolved, response);
    return absl::OkStatus();
  });
}

PlatformFacts DdoService::Platform() const {
  PlatformFacts platform;
  platform.wsl = context_.wsl;
  platform.windows = context_.windows;
  return platform;
}

MachineFacts DdoService::MachineFactsFor(const std::string& device_uuid) const {
  MachineFacts machine;
  machine.platform = Platform();
  // The device's VRAM: the one named, else the first GPU; unknown on the host backend.
  // ddod's own VRAM budget, when set, is the device it may use.
  for (const GpuDevice& gpu : context_.gpus.devices) {
    const bool named = device_uuid == gpu.uuid || device_uuid == absl::StrCat("cuda:", gpu.ordinal);
    if (named || (device_uuid.empty() && gpu.ordinal == 0)) {
      machine.total_vram_gib = gpu.total_bytes / (1024.0 * 1024.0 * 1024.0);
      if (context_.options.vram_budget_gb && *context_.options.vram_budget_gb > 0) {
        machine.total_vram_gib = std::min(machine.total_vram_gib, *context_.options.vram_budget_gb);
      }
      if (context_.bandwidth != nullptr) machine.h2d_gbps = context_.bandwidth->Get(gpu.ordinal);
    }
  }
  machine.available_ram_gib =
      QuerySystemInfo(context_.options.available_ram_override_gb, context_.options.platform_override)
          .memory.available_bytes /
      (1024.0 * 1024.0 * 1024.0);
  return machine;
}

grpc::Status DdoService::ExplainPlan(grpc::ServerContext* ctx,
                                     const ddo::v1::ExplainPlanRequest* request,
                                     ddo::v1::PlanExplanation* response) {
  constexpr char kMethod[] = "ExplainPlan";
  return Handle(kMethod, ctx, *request, [&](const Caller&) -> absl::Status {
    absl::StatusOr<std::vector<TensorEntry>> tensors = TensorTableFromProto(request->tensors());
    if (!tensors.ok()) return tensors.status();
    const std::map<std::string, std::string> settings(request->settings().begin(),
                                                      request->settings().end());
    absl::StatusOr<ddo::PlanExplanation> plan =
        ddo::ExplainPlan(*tensors, request->component(), settings, *context_.SettingLayer(),
                         MachineFactsFor(request->device_uuid()));
    if (!plan.ok()) return plan.status();
    ToProto(*plan, response);
    return absl::OkStatus();
  });
}

grpc::Status DdoService::RegisterComponent(grpc::ServerContext* ctx,
                                           const ddo::v1::RegisterComponentRequest* request,
                                           grpc::ServerWriter<ddo::v1::RegisterProgress>* writer) {
  constexpr char kMethod[] = "RegisterComponent";
  return Handle(kMethod, ctx, *request, [&](const Caller& caller) -> absl::Status {
    absl::StatusOr<Lease> lease = leases_.FindFor(request->lease_id(), caller);
    if (!lease.ok()) return lease.status();
    const bool derived = !request->base_cache_key().empty();
    DerivedRequest derived_request;
    absl::StatusOr<std::vector<TensorEntry>> tensors;
    if (derived) {
      // A derived version: the table is the base's (docs/protocol.md).
      if (request->tensors_size() != 0) {
        return absl::InvalidArgumentError(
            "a derived version (base_cache_key set) takes the base's tensor "
            "table: leave tensors empty and name changed_tensors");
      }
      derived_request.cache_key = request->cache_key();
      derived_request.base_cache_key = request->base_cache_key();
      derived_request.changed_tensors.assign(request->changed_tensors().begin(),
                                             request->changed_tensors().end());
      derived_request.content_hash = request->content_hash();
    } else {
      if (request->changed_tensors_size() != 0) {
        return absl::InvalidArgumentError(
            "changed_tensors is only for a derived version: set "
            "base_cache_key to the component it derives from");
      }
      tensors = TensorTableFromProto(request->tensors());
      if (!tensors.ok()) return tensors.status();
    }

    // Reserving a new upload's pages grows with its size: it runs while this thread reports.
    WorkProgress progress;
    const auto report = ProgressWriter(writer);
    auto register_component = [&]() -> absl::StatusOr<RegisterResult> {
      if (derived) return store_.RegisterDerived(*lease, derived_request, &progress);
      return store_.Register(*lease, request->cache_key(), *std::move(tensors),
                             request->content_hash(), &progress,
                             static_cast<int>(std::min<uint32_t>(request->upload_streams(),
                                                                 kMaxUploadStreams)));
    };
    absl::StatusOr<RegisterResult> result = RunReportingProgress<absl::StatusOr<RegisterResult>>(
        progress, register_component, report, CancelledFor(ctx, lease->id));
    if (!result.ok()) return result.status();
    if (absl::Status open = ReleaseIfLeaseEnded(*lease); !open.ok()) return open;
    if (!result->warm_hit && ctx->IsCancelled()) {
      // Nobody is left to write or abort this upload.
      (void)store_.Abort(lease->id, result->upload_id);
      return absl::CancelledError("the caller hung up while ddod reserved its upload");
    }
    ddo::v1::RegisterProgress last;
    last.set_bytes_done(progress.done());
    last.set_bytes_total(progress.total());
    last.set_done(true);
    ddo::v1::RegisterComponentResponse* response = last.mutable_result();
    ToProto(result->component, response->mutable_component());
    response->set_warm_hit(result->warm_hit);
    if (!result->warm_hit && !result->stream_write_ends.empty()) {
      // A streamed upload: the client gets its pipes' write ends, never the segment.
      const std::vector<SegmentGrant> grants =
          StreamGrants(result->upload_id, result->stream_write_ends);
      StreamedUploadToProto(result->component, grants, response);
      callers_.Grant(TokenOf(ctx), grants);
      response->set_upload_id(result->upload_id);
    } else if (!result->warm_hit) {
      // Only the segment the upload writes is listed, and writable: a derived version's shared
      // segments stay read-only for everyone.
      UploadLayoutToProto(result->component, response);
      callers_.Grant(TokenOf(ctx), UploadGrants(result->component));
      response->set_upload_id(result->upload_id);
    }
    writer->Write(last);
    return absl::OkStatus();
  });
}

grpc::Status DdoService::CommitUpload(grpc::ServerContext* ctx,
                                      const ddo::v1::CommitUploadRequest* request,
                                      grpc::ServerWriter<ddo::v1::CommitProgress>* writer) {
  constexpr char kMethod[] = "CommitUpload";
  return Handle(kMethod, ctx, *request, [&](const Caller& caller) -> absl::Status {
    absl::StatusOr<Lease> lease = leases_.FindFor(request->lease_id(), caller);
    if (!lease.ok()) return lease.status();
    // Verifying and pinning grow with the component: they run while this thread reports.
    WorkProgress progress;
    const auto report = ProgressWriter(writer);
    absl::StatusOr<ComponentSnapshot> ready = RunReportingProgress<absl::StatusOr<ComponentSnapshot>>(
        progress, [&] { return store_.Commit(lease->id, request->upload_id(), &progress); }, report,
        CancelledFor(ctx, lease->id));
    if (!ready.ok()) return ready.status();
    if (absl::Status open = ReleaseIfLeaseEnded(*lease); !open.ok()) {
      store_.DiscardUnused(ready->owner_uid, ready->cache_key, ready->segment_name);  // answered ABORTED: undone
      return open;
    }
    ddo::v1::CommitProgress last;
    last.set_bytes_done(progress.done());
    last.set_bytes_total(progress.total());
    last.set_done(true);
    ToProto(*ready, /*with_layout=*/false, last.mutable_component());
    writer->Write(last);
    return absl::OkStatus();
  });
}

grpc::Status DdoService::AbortUpload(grpc::ServerContext* ctx,
                                     const ddo::v1::AbortUploadRequest* request,
                                     ddo::v1::AbortUploadResponse* response) {
  constexpr char kMethod[] = "AbortUpload";
  return Handle(kMethod, ctx, *request, [&](const Caller& caller) -> absl::Status {
    absl::StatusOr<Lease> lease = leases_.FindFor(request->lease_id(), caller);
    if (!lease.ok()) return lease.status();
    absl::StatusOr<uint64_t> freed = store_.Abort(lease->id, request->upload_id());
    if (!freed.ok()) return freed.status();
    response->set_freed_bytes(*freed);
    return absl::OkStatus();
  });
}

// The files of a LoadSafetensors request, by path or by descriptor, never both: a path is
// opened only for ddod's own user (for anyone else ddod would read with its rights, not the
// caller's); descriptors are the ones the caller passed through the identity socket.
absl::Status DdoService::OpenRequestedFiles(grpc::ServerContext* ctx,
                                            const ddo::v1::LoadSafetensorsRequest& request,
                                            const Caller& caller, SafetensorsRequest& load) {
  const bool by_path = request.files_size() > 0 || !request.index_file().empty();
  const bool by_descriptor = request.file_handles_size() > 0 || request.index_handle() != 0;
  if (by_path == by_descriptor) {
    return absl::InvalidArgumentError(
        "name the files either by descriptor (file_handles, index_handle) "
        "or, for ddod's own user, by path (files, index_file); not both, "
        "not neither");
  }
  if (by_path) {
    if (caller.uid != ::geteuid()) {
      return absl::PermissionDeniedError(
          "ddod reads files by path only for its own user; pass the "
          "files you opened as descriptors (docs/security.md)");
    }
    auto opened = OpenSafetensorsPaths(
        std::vector<std::string>(request.files().begin(), request.files().end()),
        request.index_file());
    if (!opened.ok()) return opened.status();
    load.files = std::move(opened->first);
    load.index = std::move(opened->second);
  } else {
    std::vector<uint64_t> handles(request.file_handles().begin(),
                                  request.file_handles().end());
    if (request.index_handle() != 0) handles.push_back(request.index_handle());
    absl::StatusOr<std::vector<PassedFile>> passed = callers_.TakeFiles(TokenOf(ctx), handles);
    if (!passed.ok()) return passed.status();
    for (PassedFile& file : *passed) {
      load.files.push_back(SafetensorsSource{std::move(file.name), std::move(file.fd)});
    }
    if (request.index_handle() != 0) {
      load.index = std::move(load.files.back());
      load.files.pop_back();
    }
  }
  return absl::OkStatus();
}

grpc::Status DdoService::LoadSafetensors(grpc::ServerContext* ctx,
                                         const ddo::v1::LoadSafetensorsRequest* request,
                                         grpc::ServerWriter<ddo::v1::LoadProgress>* writer) {
  constexpr char kMethod[] = "LoadSafetensors";
  return Handle(kMethod, ctx, *request, [&](const Caller& caller) -> absl::Status {
    absl::StatusOr<Lease> lease = leases_.FindFor(request->lease_id(), caller);
    if (!lease.ok()) return lease.status();
    constexpr int64_t kMaxKeepAliveSeconds = int64_t{10} * 365 * 24 * 3600;
    if (request->keep_alive_seconds() < -1 || request->keep_alive_seconds() > kMaxKeepAliveSeconds) {
      return absl::InvalidArgumentError(absl::StrCat(
          "keep_alive_seconds=", request->keep_alive_seconds(),
          ": 0 for ddod's default, -1 for never, or 1 to ",
          kMaxKeepAliveSeconds));
    }
    SafetensorsRequest load;
    load.cache_key = request->cache_key();
    DDO_RETURN_IF_ERROR(OpenRequestedFiles(ctx, *request, caller, load));
    load.content_hash = request->content_hash();
    load.units.insert(request->units().begin(), request->units().end());
    load.file_tier = request->file_tier() == ddo::v1::FILE_TIER_NEVER    ? FileTier::kNever
                     : request->file_tier() == ddo::v1::FILE_TIER_PREFER ? FileTier::kPrefer
                                                                         : FileTier::kAuto;

    // Progress arrives from the reader threads; the writer takes one message at a time.
    absl::Mutex writer_mu;
    auto progress = [&](uint64_t done, uint64_t total) {
      ddo::v1::LoadProgress message;
      message.set_bytes_done(done);
      message.set_bytes_total(total);
      absl::MutexLock lock(&writer_mu);
      writer->Write(message);
    };
    // A load stops when its caller hangs up, its lease ends, or ddod stops.
    const std::function<bool()> cancelled = CancelledFor(ctx, lease->id);
    absl::StatusOr<LoadResult> result = store_.LoadSafetensors(*lease, std::move(load), progress, cancelled);
    if (!result.ok()) return result.status();
    if (absl::Status open = ReleaseIfLeaseEnded(*lease); !open.ok()) {
      // Answered ABORTED: nothing this load made stays behind.
      if (!result->warm_hit) {
        store_.DiscardUnused(result->component.owner_uid, result->component.cache_key,
                             result->component.segment_name);
      }
      return open;
    }
    if (request->keep_alive_seconds() != 0) {
      const absl::Duration keep = request->keep_alive_seconds() < 0
                                      ? absl::InfiniteDuration()
                                      : absl::Seconds(request->keep_alive_seconds());
      if (absl::Status kept = store_.SetKeepAlive(result->component.cache_key, caller, keep);
          !kept.ok()) {
        return kept;
      }
      result->component.keep_alive = keep;
    }
    ddo::v1::LoadProgress last;
    last.set_bytes_done(result->component.total_bytes);
    last.set_bytes_total(result->component.total_bytes);
    last.set_done(true);
    last.set_warm_hit(result->warm_hit);
    last.set_seconds(result->seconds);
    ToProto(result->component, /*with_layout=*/false, last.mutable_component());
    absl::MutexLock lock(&writer_mu);
    writer->Write(last);
    return absl::OkStatus();
  });
}

grpc::Status DdoService::GetComponent(grpc::ServerContext* ctx,
                                      const ddo::v1::GetComponentRequest* request,
                                      ddo::v1::ComponentInfo* response) {
  constexpr char kMethod[] = "GetComponent";
  return Handle(kMethod, ctx, *request, [&](const Caller& caller) -> absl::Status {
    absl::StatusOr<ComponentSnapshot> component = store_.Get(request->cache_key(), caller);
    if (!component.ok()) return component.status();
    ToProto(*component, request->with_layout(), response);
    return absl::OkStatus();
  });
}

grpc::Status DdoService::ListComponents(grpc::ServerContext* ctx,
                                        const ddo::v1::ListComponentsRequest*,
                                        ddo::v1::ListComponentsResponse* response) {
  constexpr char kMethod[] = "ListComponents";
  return HandleEntered(kMethod, ctx, [&](const Caller& caller) -> absl::Status {
    for (const ComponentSnapshot& component : store_.List(caller)) {
      ddo::v1::ComponentInfo* info = response->add_components();
      ToProto(component, /*with_layout=*/false, info);
      // Keys are per uid: a caller lists its own; the administrator everyone's, each with its
      // owner (`ddoctl ls`, `ddoctl top`'s pool per user).
      info->set_owner_uid(component.owner_uid);
      info->set_owner_shown(true);
    }
    return absl::OkStatus();
  });
}

grpc::Status DdoService::EvictComponent(grpc::ServerContext* ctx,
                                        const ddo::v1::EvictComponentRequest* request,
                                        ddo::v1::EvictComponentResponse* response) {
  constexpr char kMethod[] = "EvictComponent";
  return Handle(kMethod, ctx, *request, [&](const Caller& caller) -> absl::Status {
    // An administrator names another user's component by its owner (ddoctl evict --owner).
    const std::optional<uid_t> owner =
        request->owner_named() ? std::optional<uid_t>(request->owner_uid()) : std::nullopt;
    absl::StatusOr<uint64_t> freed = store_.Evict(request->cache_key(), caller, owner);
    if (!freed.ok()) return freed.status();
    response->set_freed_bytes(*freed);
    return absl::OkStatus();
  });
}

grpc::Status DdoService::Attach(grpc::ServerContext* ctx, const ddo::v1::AttachRequest* request,
                                ddo::v1::AttachResponse* response) {
  constexpr char kMethod[] = "Attach";
  return Handle(kMethod, ctx, *request, [&](const Caller& caller) -> absl::Status {
    absl::StatusOr<Lease> lease = leases_.FindFor(request->lease_id(), caller);
    if (!lease.ok()) return lease.status();
    if (!request->device_uuid().empty()) {
      if (absl::Status served = CheckGpuSessionAllowed(request->device_uuid(), caller);
          !served.ok()) {
        return served;
      }
      const MachineFacts machine = MachineFactsFor(request->device_uuid());
      StreamAttachRequest open_request;
      open_request.cache_key = request->cache_key();
      open_request.device = request->device_uuid();
      open_request.settings.insert(request->settings().begin(), request->settings().end());
      open_request.streamable.insert(request->streamable().begin(), request->streamable().end());
      absl::StatusOr<OpenedStream> opened = OpenStream(store_, streams_, *lease, open_request, machine);
      if (!opened.ok()) return opened.status();
      ToProto(*opened, ::getpid(), response);
      if (std::optional<PlanDecisionEntry> transfer = TransferPerPass(machine, opened->plan.streamed_bytes)) {
        ToProto(*transfer, response->mutable_plan()->add_decisions());
      }
      if (absl::Status open = ReleaseIfLeaseEnded(*lease); !open.ok()) return open;
      ToProto(opened->component, /*with_layout=*/true, response->mutable_component());
      callers_.Grant(TokenOf(ctx), SessionGrants(*opened));
      return absl::OkStatus();
    }
    absl::StatusOr<HostAttachment> attached = store_.AttachHost(*lease, request->cache_key());
    if (!attached.ok()) return attached.status();
    if (absl::Status open = ReleaseIfLeaseEnded(*lease); !open.ok()) return open;
    response->set_session_id(attached->session_id);
    ToProto(attached->component, /*with_layout=*/true, response->mutable_component());
    callers_.Grant(TokenOf(ctx), ReadGrants(attached->component));
    return absl::OkStatus();
  });
}

grpc::Status DdoService::Detach(grpc::ServerContext* ctx, const ddo::v1::DetachRequest* request,
                                ddo::v1::DetachResponse*) {
  constexpr char kMethod[] = "Detach";
  return Handle(kMethod, ctx, *request, [&](const Caller& caller) -> absl::Status {
    return sessions_.Detach(request->session_id(), caller);
  });
}

grpc::Status DdoService::SetSchedule(grpc::ServerContext* ctx, const ddo::v1::SetScheduleRequest* request,
                                     ddo::v1::SetScheduleResponse* response) {
  constexpr char kMethod[] = "SetSchedule";
  return Handle(kMethod, ctx, *request, [&](const Caller& caller) -> absl::Status {
    std::vector<uint32_t> order(request->unit_order().begin(), request->unit_order().end());
    WeightRows rows(request->weight_rows().begin(), request->weight_rows().end());
    absl::StatusOr<uint32_t> length =
        sessions_.SetSchedule(request->session_id(), caller, std::move(order), std::move(rows));
    if (!length.ok()) return length.status();
    response->set_uses_per_cycle(*length);
    return absl::OkStatus();
  });
}

grpc::Status DdoService::ListSessions(grpc::ServerContext* ctx, const ddo::v1::ListSessionsRequest*,
                                      ddo::v1::ListSessionsResponse* response) {
  return HandleEntered("ListSessions", ctx, [&](const Caller& caller) -> absl::Status {
    // Everyone sees their own; an admin sees all. Ids are capabilities: the full id is its
    // holder's, the list shows prefixes that tell leases and sessions apart.
    for (const Lease& lease : sessions_.LeasesOf(caller)) {
      auto* info = response->add_leases();
      info->set_lease_id(lease.id.substr(0, 8));
      info->set_client_pid(lease.client_pid);
      info->set_client_name(lease.client_name);
      info->set_connected_unix_ms(absl::ToUnixMillis(lease.connected));
    }
    for (const SessionView& session : sessions_.SessionsOf(caller)) {
      auto* info = response->add_sessions();
      if (session.stream.has_value()) {
        const StreamSessionInfo& stream = *session.stream;
        info->set_device_uuid(stream.device);
        info->set_streamed_bytes(stream.stats.streamed_bytes);
        info->set_out_of_schedule_uses(stream.stats.sync_uses);
        info->set_produced_uses(stream.stats.produced_uses);
        info->set_consumed_uses(stream.stats.consumed_uses);
        info->set_skipped_uses(stream.stats.skipped_uses);
        info->set_ring_slots(stream.ring_slots);
        info->set_resident_bytes(stream.resident_bytes);
        info->set_device_bytes(stream.device_bytes);
        info->set_schedule_length(stream.stats.schedule_length);
      }
      info->set_session_id(session.record.id.substr(0, 8));
      info->set_lease_id(session.record.lease_id.substr(0, 8));
      info->set_client_pid(session.client_pid);
      info->set_cache_key(session.record.cache_key);
    }
    return absl::OkStatus();
  });
}

grpc::Status DdoService::Phase(grpc::ServerContext* ctx, const ddo::v1::PhaseRequest* request,
                               ddo::v1::PhaseResponse* response) {
  constexpr char kMethod[] = "Phase";
  return Handle(kMethod, ctx, *request, [&](const Caller& caller) -> absl::Status {
    absl::StatusOr<Lease> lease = leases_.FindFor(request->lease_id(), caller);
    if (!lease.ok()) return lease.status();
    if (request->phase() == ddo::v1::PHASE_KIND_UNSPECIFIED) {
      return absl::InvalidArgumentError(
          "PhaseRequest.phase is unset: name before_run, prompt, denoise, "
          "decode or after_run");
    }
    std::set<std::string> keep(request->needed().begin(), request->needed().end());
    keep.insert(request->prefetch().begin(), request->prefetch().end());
    const std::vector<std::string> needed(request->needed().begin(), request->needed().end());
    const std::vector<std::string> prefetch(request->prefetch().begin(), request->prefetch().end());
    // Only the denoising phase runs its components many times over: only it demotes others.
    const PoolStep pool_step = request->keep_pool_bytes() ? PoolStep::kNone
                               : request->phase() == ddo::v1::PHASE_KIND_DENOISE
                                   ? PoolStep::kDemoteForRoom
                                   : PoolStep::kIntoFreeRoom;
    StreamSessions::PhaseResult result = streams_.Phase(*lease, keep, needed, prefetch, pool_step);
    response->set_released_bytes(result.released_bytes);
    response->set_prefetched_bytes(result.prefetched_bytes);
    response->set_demoted_bytes(result.demoted_bytes);
    response->set_promoting_bytes(result.promoting_bytes);
    response->set_promoted_bytes(result.promoted_bytes);
    for (std::string& note : result.notes) response->add_notes(std::move(note));
    const StandbyPurge purge = DecideStandbyPurge(request->purge_standby(), Platform());
    response->set_purged(purge.purged);
    response->set_purge_reason(purge.reason);
    Logger("service")->info(
        "phase {} of lease {}: released {}, prefetched {}, demoted {}, promoting {}",
        ddo::v1::PhaseKind_Name(request->phase()), lease->id.substr(0, 8),
        FormatBytes(result.released_bytes), FormatBytes(result.prefetched_bytes),
        FormatBytes(result.demoted_bytes), FormatBytes(result.promoting_bytes));
    return absl::OkStatus();
  });
}

namespace {

// ddod's default profile directory: its DDO_PROFILE_DIR, else ~/.ddo/profiles of its user.
std::string ProfileDir(const DaemonContext& context, const std::string& requested) {
  const auto layer = context.SettingLayer();
  auto configured = layer->find("DDO_PROFILE_DIR");
  return ResolveProfileDir(requested, configured == layer->end() ? "" : configured->second,
                           Lookup(ProcessEnvironment(), "HOME").value_or(""));
}

// The caller's profiles: ddod's own user may name a directory (or gets ddod's default one);
// everyone else has a directory of their own in ddod's profile root and may name none, since
// ddod would open it with its own rights.
absl::StatusOr<ProfileStore> ProfileStoreFor(const DaemonContext& context, const Caller& caller,
                                             const std::string& requested,
                                             ProfileStore::IfMissing if_missing) {
  if (caller.uid == ::geteuid()) {
    return ProfileStore::ForDirectory(ProfileDir(context, requested), if_missing);
  }
  if (!requested.empty()) {
    return absl::PermissionDeniedError(
        "ddod keeps other users' profiles in its own per-user store: profile_dir is honoured "
        "only for ddod's own user; send none");
  }
  return ProfileStore::ForUser(absl::StrCat(context.options.state_dir, "/profiles"), caller.uid,
                               if_missing);
}

void ToProto(const ProfileFile& file, ddo::v1::Profile* out) {
  out->mutable_ref()->set_key(file.key);
  out->mutable_ref()->set_name(file.name);
  out->set_json(file.json);
  out->set_modified_unix_ms(file.modified_unix_ms);
}

}  // namespace

grpc::Status DdoService::ListProfiles(grpc::ServerContext* ctx, const ddo::v1::ListProfilesRequest* request,
                                      ddo::v1::ListProfilesResponse* response) {
  constexpr char kMethod[] = "ListProfiles";
  return Handle(kMethod, ctx, *request, [&](const Caller& caller) -> absl::Status {
    absl::StatusOr<ProfileStore> store = ProfileStoreFor(
        context_, caller, request->profile_dir(), ProfileStore::IfMissing::kEmpty);
    if (!store.ok()) return store.status();
    absl::StatusOr<std::vector<ProfileFile>> files = store->List();
    if (!files.ok()) return files.status();
    for (const ProfileFile& file : *files) ToProto(file, response->add_profiles());
    return absl::OkStatus();
  });
}

grpc::Status DdoService::GetProfile(grpc::ServerContext* ctx, const ddo::v1::GetProfileRequest* request,
                                    ddo::v1::Profile* response) {
  constexpr char kMethod[] = "GetProfile";
  return Handle(kMethod, ctx, *request, [&](const Caller& caller) -> absl::Status {
    absl::StatusOr<ProfileStore> store = ProfileStoreFor(
        context_, caller, request->profile_dir(), ProfileStore::IfMissing::kEmpty);
    if (!store.ok()) return store.status();
    absl::StatusOr<ProfileFile> file = store->Get(request->ref().key());
    if (!file.ok()) return file.status();
    ToProto(*file, response);
    return absl::OkStatus();
  });
}

grpc::Status DdoService::PutProfile(grpc::ServerContext* ctx, const ddo::v1::PutProfileRequest* request,
                                    ddo::v1::Profile* response) {
  constexpr char kMethod[] = "PutProfile";
  return Handle(kMethod, ctx, *request, [&](const Caller& caller) -> absl::Status {
    absl::StatusOr<ProfileStore> store = ProfileStoreFor(
        context_, caller, request->profile_dir(), ProfileStore::IfMissing::kCreate);
    if (!store.ok()) return store.status();
    absl::StatusOr<ProfileFile> file =
        store->Put(request->profile().ref().key(), request->profile().json());
    if (!file.ok()) return file.status();
    ToProto(*file, response);
    return absl::OkStatus();
  });
}

grpc::Status DdoService::DeleteProfile(grpc::ServerContext* ctx,
                                       const ddo::v1::DeleteProfileRequest* request,
                                       ddo::v1::DeleteProfileResponse* response) {
  constexpr char kMethod[] = "DeleteProfile";
  return Handle(kMethod, ctx, *request, [&](const Caller& caller) -> absl::Status {
    absl::StatusOr<ProfileStore> store = ProfileStoreFor(
        context_, caller, request->profile_dir(), ProfileStore::IfMissing::kEmpty);
    if (!store.ok()) return store.status();
    absl::StatusOr<bool> deleted = store->Delete(request->ref().key());
    if (!deleted.ok()) return deleted.status();
    response->set_deleted(*deleted);
    return absl::OkStatus();
  });
}

}  // namespace ddo
