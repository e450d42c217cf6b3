// RpcClient's calls: a plain struct in, a request out, the answer converted back (convert.h).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "channel.h"
#include "client_impl.h"
#include "convert.h"
#include "ddo/rpc.h"
#include "ddo/wire/posix_error.h"
#include "stall_watchdog.h"
#include "status_conversion.h"

namespace ddo {
namespace {

// The deadline of a unary call whose work in ddod grows with the model (Attach may read the
// component back from its files and fill a slab of resident weights, and answers with the whole
// tensor table): the client's timeout is for calls that cost the same whatever the model. A
// ddod that goes away ends the call at once.
constexpr double kModelSizedCallSeconds = 3600.0;

// Makes one unary call of the Ddo service with `impl`'s deadline and token.
template <typename Method, typename Request, typename Response>
Status Call(const RpcClient::Impl& impl, Method method, const Request& request,
            Response* response, bool with_token = true) {
  grpc::ClientContext context;
  impl.Prepare(&context, with_token);
  return FromGrpc(((*impl.stub).*method)(&context, request, response));
}

// Makes one unary call of the Ddo service with `impl`'s token and kModelSizedCallSeconds.
template <typename Method, typename Request, typename Response>
Status CallSizedByModel(const RpcClient::Impl& impl, Method method, const Request& request,
                        Response* response) {
  grpc::ClientContext context;
  impl.Prepare(&context);
  SetDeadline(&context, kModelSizedCallSeconds);
  return FromGrpc(((*impl.stub).*method)(&context, request, response));
}

// The stall limit of a progress call: the caller's, or the larger of 60 s and 12 timeouts.
double StallSeconds(const RpcClient::Impl& impl, double requested) {
  return requested > 0 ? requested : std::max(60.0, 12 * impl.timeout_seconds);
}

// Makes one progress-streaming call of the Ddo service (RegisterComponent, CommitUpload,
// LoadSafetensors: work that grows with the component) with `impl`'s token and no deadline,
// and returns its last message (done set). The call is cancelled when ddod sends nothing for
// `stall_seconds`; that answers DEADLINE_EXCEEDED naming the RPC.
template <typename Progress, typename Method, typename Request>
StatusOr<Progress> FollowProgress(const RpcClient::Impl& impl, Method method,
                                  const Request& request, const char* name,
                                  double stall_seconds) {
  grpc::ClientContext context;
  context.AddMetadata("ddo-token", impl.identity->token());
  std::unique_ptr<grpc::ClientReader<Progress>> reader = ((*impl.stub).*method)(&context, request);
  Progress message;
  std::optional<Progress> last;
  bool stalled = false;
  Status finished;
  {
    StallWatchdog watchdog(stall_seconds, [&context] { context.TryCancel(); });
    while (reader->Read(&message)) {
      watchdog.Progress();
      if (message.done()) last = message;
    }
    finished = FromGrpc(reader->Finish());
    stalled = watchdog.fired();
  }
  if (stalled && !finished.ok()) {
    return Status(StatusCode::kDeadlineExceeded,
                  absl::StrCat("ddod sent no ", name, " progress for ", stall_seconds,
                               " s; gave up"));
  }
  if (!finished.ok()) return finished;
  if (!last.has_value()) {
    return Status(StatusCode::kInternal, absl::StrCat("ddod ended ", name, " without a result"));
  }
  return *std::move(last);
}

// A shared-memory name as ddod makes them: "/" and a name without '/'.
bool IsSegmentName(const std::string& name) {
  return name.size() >= 2 && name[0] == '/' && name.find('/', 1) == std::string::npos &&
         name.find('\0') == std::string::npos && name != "/." && name != "/..";
}

// Writes all of `size` bytes at `offset`.
absl::Status WriteAll(int fd, const void* data, size_t size, uint64_t offset) {
  const char* bytes = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t written = ::pwrite(fd, bytes, size, static_cast<off_t>(offset));
    if (written < 0 && errno == EINTR) continue;
    if (written <= 0) return PosixError("pwrite to an upload segment", errno);
    bytes += written;
    size -= static_cast<size_t>(written);
    offset += static_cast<uint64_t>(written);
  }
  return absl::OkStatus();
}

}  // namespace

RpcClient::RpcClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RpcClient::RpcClient(RpcClient&&) noexcept = default;
RpcClient& RpcClient::operator=(RpcClient&&) noexcept = default;
RpcClient::~RpcClient() = default;

StatusOr<RpcClient> RpcClient::Connect(const ConnectOptions& options) {
  absl::StatusOr<std::unique_ptr<Impl>> impl = ConnectClient(options);
  if (!impl.ok()) return FromAbsl(impl.status());
  return RpcClient(*std::move(impl));
}

const std::string& RpcClient::target() const { return impl_->target; }
const std::string& RpcClient::lease_id() const { return impl_->lease->lease_id(); }
uid_t RpcClient::daemon_uid() const { return impl_->identity->daemon_uid(); }
pid_t RpcClient::embedded_pid() const {
  return impl_->embedded != nullptr ? impl_->embedded->pid() : 0;
}
bool RpcClient::daemon_shutting_down() const { return impl_->lease->shutting_down(); }
std::string RpcClient::lease_lost_reason() const { return impl_->lease->lost_reason(); }

StatusOr<DaemonInfo> RpcClient::info() {
  ddo::v1::DaemonInfo response;
  Status status = Call(*impl_, &ddo::v1::Ddo::Stub::GetInfo, ddo::v1::GetInfoRequest(),
                       &response, /*with_token=*/false);
  if (!status.ok()) return status;
  return FromProto(response);
}

StatusOr<std::string> RpcClient::health(const std::string& service) {
  absl::StatusOr<std::string> health = CheckHealth(impl_->channel, service,
                                                   impl_->timeout_seconds);
  if (!health.ok()) return FromAbsl(health.status());
  return *health;
}

StatusOr<std::vector<ComponentInfo>> RpcClient::components() {
  ddo::v1::ListComponentsResponse response;
  Status status = Call(*impl_, &ddo::v1::Ddo::Stub::ListComponents,
                       ddo::v1::ListComponentsRequest(), &response);
  if (!status.ok()) return status;
  std::vector<ComponentInfo> result;
  for (const ddo::v1::ComponentInfo& info : response.components()) {
    result.push_back(FromProto(info));
  }
  return result;
}

StatusOr<ComponentInfo> RpcClient::component(const std::string& cache_key, bool with_layout) {
  ddo::v1::GetComponentRequest request;
  request.set_cache_key(cache_key);
  request.set_with_layout(with_layout);
  ddo::v1::ComponentInfo response;
  Status status = Call(*impl_, &ddo::v1::Ddo::Stub::GetComponent, request, &response);
  if (!status.ok()) return status;
  return FromProto(response);
}

StatusOr<uint64_t> RpcClient::evict(const std::string& cache_key) {
  ddo::v1::EvictComponentRequest request;
  request.set_cache_key(cache_key);
  ddo::v1::EvictComponentResponse response;
  Status status = Call(*impl_, &ddo::v1::Ddo::Stub::EvictComponent, request, &response);
  if (!status.ok()) return status;
  return response.freed_bytes();
}

StatusOr<Upload> RpcClient::register_component(const std::string& cache_key,
                                               const std::vector<TensorSpec>& tensors,
                                               const std::string& content_hash) {
  ddo::v1::RegisterComponentRequest request;
  request.set_lease_id(lease_id());
  request.set_cache_key(cache_key);
  for (const TensorSpec& spec : tensors) ToProto(spec, request.add_tensors());
  request.set_content_hash(content_hash);
  // Reserving the upload's memory grows with the component: no fixed deadline.
  StatusOr<ddo::v1::RegisterProgress> last = FollowProgress<ddo::v1::RegisterProgress>(
      *impl_, &ddo::v1::Ddo::Stub::RegisterComponent, request, "RegisterComponent",
      StallSeconds(*impl_, 0));
  if (!last.ok()) return last.status();
  return FromProto(last->result());
}

Status RpcClient::write_upload(const Upload& upload,
                               const std::map<std::string, TensorBytes>& tensors) {
  std::map<uint32_t, UniqueFd> opened;  // each segment once
  for (const Placement& placement : upload.placements) {
    auto found = tensors.find(placement.name);
    if (found == tensors.end()) {
      return Status(StatusCode::kInvalidArgument,
                    absl::StrCat("no bytes for tensor '", placement.name, "' of the upload"));
    }
    if (found->second.size != placement.byte_size) {
      return Status(StatusCode::kInvalidArgument,
                    absl::StrCat("tensor '", placement.name, "' has ", found->second.size,
                                 " bytes; its placement holds ", placement.byte_size));
    }
    if (placement.segment >= upload.segments.size()) {
      return Status(StatusCode::kInternal,
                    absl::StrCat("ddod placed '", placement.name, "' in segment ",
                                 placement.segment, " of ", upload.segments.size()));
    }
    auto segment = opened.find(placement.segment);
    if (segment == opened.end()) {
      StatusOr<UniqueFd> fd = open_segment(upload.segments[placement.segment].shm_name, true);
      if (!fd.ok()) return fd.status();
      segment = opened.emplace(placement.segment, std::move(fd).value()).first;
    }
    absl::Status written = WriteAll(segment->second.get(), found->second.data,
                                    found->second.size, placement.offset);
    if (!written.ok()) return FromAbsl(written);
  }
  return OkStatus();
}

StatusOr<ComponentInfo> RpcClient::commit(const std::string& upload_id) {
  ddo::v1::CommitUploadRequest request;
  request.set_lease_id(lease_id());
  request.set_upload_id(upload_id);
  // Verifying and pinning grow with the component: no fixed deadline.
  StatusOr<ddo::v1::CommitProgress> last = FollowProgress<ddo::v1::CommitProgress>(
      *impl_, &ddo::v1::Ddo::Stub::CommitUpload, request, "CommitUpload",
      StallSeconds(*impl_, 0));
  if (!last.ok()) return last.status();
  return FromProto(last->component());
}

StatusOr<uint64_t> RpcClient::abort(const std::string& upload_id) {
  ddo::v1::AbortUploadRequest request;
  request.set_lease_id(lease_id());
  request.set_upload_id(upload_id);
  ddo::v1::AbortUploadResponse response;
  Status status = Call(*impl_, &ddo::v1::Ddo::Stub::AbortUpload, request, &response);
  if (!status.ok()) return status;
  return response.freed_bytes();
}

StatusOr<LoadResult> RpcClient::load_safetensors(const std::string& cache_key,
                                                 const std::vector<std::string>& paths,
                                                 const LoadOptions& options) {
  ddo::v1::LoadSafetensorsRequest request;
  request.set_lease_id(lease_id());
  request.set_cache_key(cache_key);
  request.set_content_hash(options.content_hash);
  request.set_keep_alive_seconds(options.keep_alive_seconds);
  request.mutable_units()->insert(options.units.begin(), options.units.end());
  for (const std::string& path : paths) {
    // O_NONBLOCK: a FIFO put in a file's place does not hang the open.
    UniqueFd file(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK));
    if (!file.valid()) return FromAbsl(PosixError(absl::StrCat("open ", path), errno));
    const size_t slash = path.find_last_of('/');
    const std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
    absl::StatusOr<uint64_t> handle = impl_->identity->PassFile(base, file.get());
    if (!handle.ok()) {
      return Status(static_cast<StatusCode>(handle.status().code()),
                    absl::StrCat("passing ", path, " to ddod: ", handle.status().message()));
    }
    request.add_file_handles(*handle);
  }
  // No deadline: reading a model takes as long as the disk needs.
  StatusOr<ddo::v1::LoadProgress> last = FollowProgress<ddo::v1::LoadProgress>(
      *impl_, &ddo::v1::Ddo::Stub::LoadSafetensors, request, "LoadSafetensors",
      StallSeconds(*impl_, options.stall_timeout_seconds));
  if (!last.ok()) return last.status();
  return LoadResult{FromProto(last->component()), last->warm_hit(), last->seconds()};
}

StatusOr<AttachAnswer> RpcClient::attach(const std::string& cache_key,
                                         const std::string& device_uuid,
                                         const std::map<std::string, std::string>& settings,
                                         const std::vector<std::string>& streamable) {
  ddo::v1::AttachRequest request;
  request.set_lease_id(lease_id());
  request.set_cache_key(cache_key);
  request.set_device_uuid(device_uuid);
  request.mutable_settings()->insert(settings.begin(), settings.end());
  for (const std::string& name : streamable) request.add_streamable(name);
  ddo::v1::AttachResponse response;
  Status status = CallSizedByModel(*impl_, &ddo::v1::Ddo::Stub::Attach, request, &response);
  if (!status.ok()) return status;
  return FromProto(response);
}

Status RpcClient::detach(const std::string& session_id) {
  ddo::v1::DetachRequest request;
  request.set_session_id(session_id);
  ddo::v1::DetachResponse response;
  return Call(*impl_, &ddo::v1::Ddo::Stub::Detach, request, &response);
}

StatusOr<uint32_t> RpcClient::set_schedule(const std::string& session_id,
                                           const std::vector<uint32_t>& unit_order) {
  ddo::v1::SetScheduleRequest request;
  request.set_session_id(session_id);
  for (uint32_t unit : unit_order) request.add_unit_order(unit);
  ddo::v1::SetScheduleResponse response;
  Status status = Call(*impl_, &ddo::v1::Ddo::Stub::SetSchedule, request, &response);
  if (!status.ok()) return status;
  return response.uses_per_cycle();
}

StatusOr<ResolvedSettings> RpcClient::resolve_settings(
    const std::string& preset, const std::map<std::string, std::string>& environment,
    const std::map<std::string, std::string>& overrides,
    const std::vector<std::string>& components) {
  ddo::v1::ResolveSettingsRequest request;
  request.set_preset(preset);
  request.mutable_environment()->insert(environment.begin(), environment.end());
  request.mutable_overrides()->insert(overrides.begin(), overrides.end());
  for (const std::string& component : components) request.add_components(component);
  ddo::v1::ResolvedSettings response;
  Status status = Call(*impl_, &ddo::v1::Ddo::Stub::ResolveSettings, request, &response);
  if (!status.ok()) return status;
  return FromProto(response);
}

StatusOr<PlanExplanation> RpcClient::explain_plan(
    const std::vector<TensorSpec>& tensors, const std::string& device_uuid,
    const std::map<std::string, std::string>& settings, const std::string& component) {
  ddo::v1::ExplainPlanRequest request;
  for (const TensorSpec& spec : tensors) ToProto(spec, request.add_tensors());
  request.set_device_uuid(device_uuid);
  request.mutable_settings()->insert(settings.begin(), settings.end());
  request.set_component(component);
  ddo::v1::PlanExplanation response;
  Status status = Call(*impl_, &ddo::v1::Ddo::Stub::ExplainPlan, request, &response);
  if (!status.ok()) return status;
  return FromProto(response);
}

StatusOr<UniqueFd> RpcClient::open_segment(const std::string& shm_name, bool writable) {
  if (!IsSegmentName(shm_name)) {
    return Status(StatusCode::kInvalidArgument,
                  absl::StrCat("'", shm_name, "' is not a shared-memory segment name"));
  }
  const std::string path = "/dev/shm" + shm_name;
  const char* access = writable ? "read-write" : "read-only";
  if (daemon_uid() == ::geteuid()) {
    // ddod runs as this user: open by name, refusing a file another user put there.
    UniqueFd fd(::open(path.c_str(),
                       (writable ? O_RDWR : O_RDONLY) | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY));
    if (fd.valid()) {
      struct stat info {};
      if (::fstat(fd.get(), &info) != 0 || info.st_uid != daemon_uid()) {
        return Status(StatusCode::kPermissionDenied,
                      absl::StrCat("the segment ", path, " belongs to uid ", info.st_uid,
                                   ", not to ddod's uid ", daemon_uid(), ": refusing to use it"));
      }
      return fd;
    }
    if (errno != EACCES && errno != EPERM) {
      return FromAbsl(PosixError(absl::StrCat("open the segment ", path, " ", access), errno));
    }
  }
  absl::StatusOr<UniqueFd> fd = impl_->identity->OpenSegment(shm_name, writable);
  if (!fd.ok()) {
    return Status(static_cast<StatusCode>(fd.status().code()),
                  absl::StrCat("cannot open the segment ", path, " ", access, ": ",
                               fd.status().message()));
  }
  return *std::move(fd);
}

StatusOr<UniqueFd> RpcClient::open_backing_file(const std::string& shm_name) {
  if (!IsSegmentName(shm_name)) {
    return Status(StatusCode::kInvalidArgument,
                  absl::StrCat("'", shm_name, "' is not a backing file's name"));
  }
  absl::StatusOr<UniqueFd> fd = impl_->identity->OpenSegment(shm_name, /*writable=*/false);
  if (!fd.ok()) {
    return Status(static_cast<StatusCode>(fd.status().code()),
                  absl::StrCat("cannot open the backing file ", shm_name, " read-only: ",
                               fd.status().message()));
  }
  return *std::move(fd);
}

}  // namespace ddo
