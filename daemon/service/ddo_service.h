// File: daemon/service/ddo_service.h
//
// The gRPC handlers of ddo.v1.Ddo. Handlers validate, call the core and map absl::Status to
// grpc::Status; nothing else lives here. RPCs whose capability is not built yet answer
// UNIMPLEMENTED with a message naming the capability (docs/protocol.md lists them).
//
// Thread-safety: handlers run concurrently on gRPC's threads; every member is either
// immutable (context_) or synchronised internally.
#ifndef DDO_DAEMON_SERVICE_DDO_SERVICE_H_
#define DDO_DAEMON_SERVICE_DDO_SERVICE_H_

#include <atomic>
#include <functional>
#include <optional>
#include <string>

#include "daemon/common/status_macros.h"
#include "daemon/common/work_progress.h"
#include "daemon/identity/caller_registry.h"
#include "daemon/service/daemon_context.h"
#include "daemon/service/calls_per_user.h"
#include "daemon/service/request_limits.h"
#include "daemon/service/rpc_counters.h"
#include "daemon/store/component_store.h"
#include "daemon/policy/resident_policy.h"
#include "daemon/stream/session_directory.h"
#include "daemon/stream/stream_sessions.h"
#include "daemon/session/lease_registry.h"
#include "ddo/v1/ddo.grpc.pb.h"

namespace ddo {

class DdoService final : public ddo::v1::Ddo::Service {
 public:
  // Calls (other than Connect streams) one non-admin user may have running at once.
  static constexpr size_t kMaxCallsPerUser = 64;

  DdoService(const DaemonContext& context, HostPool& pool, SessionRegistry& session_registry,
             ComponentStore& store, StreamSessions& streams, CallerRegistry& callers,
             LeaseLimits lease_limits = {})
      : context_(context),
        pool_(pool),
        session_registry_(session_registry),
        store_(store),
        streams_(streams),
        callers_(callers),
        leases_(lease_limits) {}

  // From now on every new request is refused with UNAVAILABLE and every Connect stream is
  // sent a shutting_down event and ended.
  void BeginShutdown(const std::string& reason);

  const LeaseRegistry& leases() const { return leases_; }

  // Handlers running now (Connect streams included).
  int in_flight() const { return in_flight_.load(); }

  grpc::Status GetInfo(grpc::ServerContext* ctx, const ddo::v1::GetInfoRequest* request,
                       ddo::v1::DaemonInfo* response) override;
  grpc::Status GetStats(grpc::ServerContext* ctx, const ddo::v1::GetStatsRequest* request,
                        ddo::v1::Stats* response) override;
  grpc::Status ListPresets(grpc::ServerContext* ctx, const ddo::v1::ListPresetsRequest* request,
                           ddo::v1::ListPresetsResponse* response) override;
  grpc::Status ResolveSettings(grpc::ServerContext* ctx,
                               const ddo::v1::ResolveSettingsRequest* request,
                               ddo::v1::ResolvedSettings* response) override;
  grpc::Status ExplainPlan(grpc::ServerContext* ctx, const ddo::v1::ExplainPlanRequest* request,
                           ddo::v1::PlanExplanation* response) override;
  grpc::Status Connect(grpc::ServerContext* ctx, const ddo::v1::ConnectRequest* request,
                       grpc::ServerWriter<ddo::v1::ConnectEvent>* writer) override;
  grpc::Status RegisterComponent(grpc::ServerContext* ctx,
                                 const ddo::v1::RegisterComponentRequest* request,
                                 grpc::ServerWriter<ddo::v1::RegisterProgress>* writer) override;
  grpc::Status CommitUpload(grpc::ServerContext* ctx, const ddo::v1::CommitUploadRequest* request,
                            grpc::ServerWriter<ddo::v1::CommitProgress>* writer) override;
  grpc::Status AbortUpload(grpc::ServerContext* ctx, const ddo::v1::AbortUploadRequest* request,
                           ddo::v1::AbortUploadResponse* response) override;
  grpc::Status LoadSafetensors(grpc::ServerContext* ctx,
                               const ddo::v1::LoadSafetensorsRequest* request,
                               grpc::ServerWriter<ddo::v1::LoadProgress>* writer) override;
  grpc::Status GetComponent(grpc::ServerContext* ctx, const ddo::v1::GetComponentRequest* request,
                            ddo::v1::ComponentInfo* response) override;
  grpc::Status ListComponents(grpc::ServerContext* ctx,
                              const ddo::v1::ListComponentsRequest* request,
                              ddo::v1::ListComponentsResponse* response) override;
  grpc::Status EvictComponent(grpc::ServerContext* ctx,
                              const ddo::v1::EvictComponentRequest* request,
                              ddo::v1::EvictComponentResponse* response) override;
  grpc::Status Attach(grpc::ServerContext* ctx, const ddo::v1::AttachRequest* request,
                      ddo::v1::AttachResponse* response) override;
  grpc::Status Detach(grpc::ServerContext* ctx, const ddo::v1::DetachRequest* request,
                      ddo::v1::DetachResponse* response) override;
  grpc::Status SetSchedule(grpc::ServerContext* ctx, const ddo::v1::SetScheduleRequest* request,
                           ddo::v1::SetScheduleResponse* response) override;
  grpc::Status ListSessions(grpc::ServerContext* ctx, const ddo::v1::ListSessionsRequest* request,
                            ddo::v1::ListSessionsResponse* response) override;
  grpc::Status Phase(grpc::ServerContext* ctx, const ddo::v1::PhaseRequest* request,
                     ddo::v1::PhaseResponse* response) override;
  grpc::Status ListProfiles(grpc::ServerContext* ctx, const ddo::v1::ListProfilesRequest* request,
                            ddo::v1::ListProfilesResponse* response) override;
  grpc::Status GetProfile(grpc::ServerContext* ctx, const ddo::v1::GetProfileRequest* request,
                          ddo::v1::Profile* response) override;
  grpc::Status PutProfile(grpc::ServerContext* ctx, const ddo::v1::PutProfileRequest* request,
                          ddo::v1::Profile* response) override;
  grpc::Status DeleteProfile(grpc::ServerContext* ctx,
                             const ddo::v1::DeleteProfileRequest* request,
                             ddo::v1::DeleteProfileResponse* response) override;

 private:
  // One handler's run, from its first line to its return. It counts the handler in flight
  // (in_flight_) while it exists; Serving() is UNAVAILABLE once shutdown has begun; Enter also
  // identifies the caller by the token in its "ddo-token" metadata (UNAUTHENTICATED without a
  // valid one) and counts the call against its user's bound (calls_; a Connect stream,
  // `lease_stream`, is bounded by the lease limits instead and not timed); Admit is Enter and
  // the request's bounds (request_limits.h). Finish records the outcome and the latency and
  // converts the status for gRPC. The destructor gives back what was counted, on every path.
  // Only GetInfo serves anonymous callers.
  class Call {
   public:
    Call(DdoService& service, const char* method);
    Call(const Call&) = delete;
    Call& operator=(const Call&) = delete;
    ~Call();

    absl::Status Serving() const;
    absl::StatusOr<Caller> Enter(grpc::ServerContext* ctx, bool lease_stream = false);
    template <typename Request>
    absl::StatusOr<Caller> Admit(grpc::ServerContext* ctx, const Request& request,
                                 bool lease_stream = false) {
      DDO_ASSIGN_OR_RETURN(Caller caller, Enter(ctx, lease_stream));
      DDO_RETURN_IF_ERROR(CheckRequest(request));
      return caller;
    }
    grpc::Status Finish(const absl::Status& status);

   private:
    DdoService& service_;
    const char* const method_;
    const absl::Time began_;
    bool timed_ = true;
    bool finished_ = false;
    std::optional<uid_t> counted_uid_;  // set once calls_ counted this call
  };
  // Fills `load`'s files from `request`: by path (ddod's own user only) or by descriptor.
  absl::Status OpenRequestedFiles(grpc::ServerContext* ctx,
                                  const ddo::v1::LoadSafetensorsRequest& request,
                                  const Caller& caller, SafetensorsRequest& load);
  // One unary call: the caller is identified and counted (Call::Enter), the request checked
  // against its limits (request_limits.h), then `body` runs with the caller and its status
  // finishes the call (counters, latency, the gRPC status). Every handler but GetInfo (served
  // to anyone, even while stopping) and Connect (the lease stream) goes through it.
  template <typename Request, typename Body>
  grpc::Status Handle(const char* method, grpc::ServerContext* ctx, const Request& request,
                      Body&& body) {
    Call call(*this, method);
    absl::StatusOr<Caller> caller = call.Admit(ctx, request);
    if (!caller.ok()) return call.Finish(caller.status());
    return call.Finish(body(*caller));
  }
  // The same for a request with nothing to check.
  template <typename Body>
  grpc::Status HandleEntered(const char* method, grpc::ServerContext* ctx, Body&& body) {
    Call call(*this, method);
    absl::StatusOr<Caller> caller = call.Enter(ctx);
    if (!caller.ok()) return call.Finish(caller.status());
    return call.Finish(body(*caller));
  }
  // After a call created something for `lease`: when the lease ended meanwhile (its client
  // died), releases what it owns and returns ABORTED.
  absl::Status ReleaseIfLeaseEnded(const Lease& lease);
  // FAILED_PRECONDITION, saying why and what to do, when `caller` may not stream on `device`:
  // a GPU session is served to ddod's own user and root only.
  static absl::Status CheckGpuSessionAllowed(const std::string& device, const Caller& caller);
  // Whether long work for this call should stop: its caller hung up, its lease ended, or ddod
  // is stopping.
  std::function<bool()> CancelledFor(grpc::ServerContext* ctx, const std::string& lease_id);
  // The token this call carries ("" when none).
  static std::string TokenOf(grpc::ServerContext* ctx);
  // The platform ddod runs on (the facts the settings' platform rules read).
  PlatformFacts Platform() const;
  // The platform, the named device's VRAM (else the first GPU's) and the available RAM.
  MachineFacts MachineFactsFor(const std::string& device_uuid) const;

  const DaemonContext& context_;
  HostPool& pool_;
  SessionRegistry& session_registry_;
  ComponentStore& store_;
  StreamSessions& streams_;
  CallerRegistry& callers_;
  LeaseRegistry leases_;
  SessionDirectory sessions_{leases_, session_registry_, store_, streams_};
  CallsPerUser calls_{kMaxCallsPerUser};
  RpcCounters counters_;
  std::atomic<bool> shutting_down_{false};
  std::atomic<int> in_flight_{0};
};

}  // namespace ddo

#endif  // DDO_DAEMON_SERVICE_DDO_SERVICE_H_
