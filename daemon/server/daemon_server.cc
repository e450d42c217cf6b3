#include "daemon/server/daemon_server.h"

#include <fcntl.h>
#include <grp.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/resource_quota.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server_builder.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "daemon/common/descriptor_reserve.h"
#include "daemon/platform/process_footprint.h"
#include "daemon/common/format_bytes.h"
#include "daemon/common/logging.h"
#include "daemon/common/runtime_dir.h"
#include "daemon/common/status_macros.h"
#include "daemon/common/version.h"
#include "daemon/config/budgets.h"
#include "daemon/config/values.h"
#include "daemon/device/h2d_bandwidth.h"
#include "daemon/platform/system_info.h"
#include "daemon/pool/host_pinning.h"
#include "daemon/server/connection_gate.h"
#include "daemon/server/tcp_listener.h"
#include "daemon/server/socket_activation.h"
#include "ddo/wire/identity_protocol.h"
#include "ddo/wire/posix_error.h"

namespace ddo {
namespace {

// Requests carry tensor tables, not tensors; 64 MiB holds the table of any real model.
constexpr int kMaxMessageBytes = 64 << 20;
// Every Connect stream holds a thread for its client's life.
constexpr int kMaxServerThreads = 512;
// How long in-flight calls get to finish at shutdown before they are cancelled.
constexpr absl::Duration kShutdownGrace = absl::Seconds(5);

constexpr char kServiceName[] = "ddo.v1.Ddo";

// The gRPC Unix socket, bound by ddod (not by gRPC, so that ddod's ConnectionGate accepts on
// it) and owner-only from its first instant (a umask around bind).
absl::StatusOr<UniqueFd> ListenOnUnixSocket(const std::string& path) {
  sockaddr_un address{};
  if (path.size() >= sizeof(address.sun_path)) {
    return absl::InvalidArgumentError(
        absl::StrCat("the socket path ", path, " is longer than a Unix socket path may be"));
  }
  UniqueFd listener(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!listener.valid()) return PosixError("socket(AF_UNIX, SOCK_STREAM)", errno);
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  const mode_t previous_umask = ::umask(0177);
  const int bound = ::bind(listener.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address));
  const int bind_errno = errno;
  ::umask(previous_umask);
  if (bound != 0) return PosixError(absl::StrCat("bind ", path), bind_errno);
  if (::listen(listener.get(), SOMAXCONN) != 0) {
    return PosixError(absl::StrCat("listen ", path), errno);
  }
  return listener;
}

ConnectionLimits ConnectionLimitsOf(const DaemonOptions& options) {
  ConnectionLimits limits;
  limits.per_uid = static_cast<size_t>(options.max_connections_per_user);
  limits.in_all = static_cast<size_t>(options.max_connections);
  return limits;
}

// The start's first lines: version, preset, machine, RAM budget and every device.
void LogMachine(const DaemonContext& context, const SystemInfo& system) {
  auto log = Logger("server");
  log->info("ddod {} preset {} (requested '{}'), {} on {} ({}), RAM budget {:.1f} GiB",
            kVersion, context.options.preset->name, context.options.requested_preset,
            OsFlavorName(system.os), system.hostname, system.os_release,
            context.ram_budget_bytes / (1024.0 * 1024 * 1024));
  log->info("backend: {}", context.gpus.detail);
  for (const GpuDevice& gpu : context.gpus.devices) {
    log->info("device {}: {} {} ({:.1f} GiB, sm {}, {})", gpu.ordinal, gpu.uuid, gpu.name,
              gpu.total_bytes / (1024.0 * 1024 * 1024), gpu.compute_capability, gpu.pci_bus_id);
  }
}

// Whether ddod serves as a long-lived service that keeps weights warm for later runners
// (DDO_CACHE_PINNED_WEIGHTS, set by the warm_process preset).
bool KeepsWeightsWarm(const DaemonOptions& options) {
  std::string warm = "0";
  if (auto it = options.setting_environment.find("DDO_CACHE_PINNED_WEIGHTS");
      it != options.setting_environment.end()) {
    warm = it->second;
  } else if (options.preset != nullptr) {
    warm = options.preset->Find("DDO_CACHE_PINNED_WEIGHTS").value_or("0");
  }
  return ParseSeedBool(warm);
}

// The streaming engine's options from ddod's: the VRAM budget, host devices, and the RAM bound.
StreamSessionsOptions StreamSessionsOptionsOf(const DaemonContext& context) {
  StreamSessionsOptions streams;
  streams.vram_budget_bytes =
      context.options.vram_budget_gb ? GiBToBytes(*context.options.vram_budget_gb) : 0;
  streams.host_devices = context.options.host_devices;
  streams.file_read_threads = context.options.file_read_threads;
  streams.file_staging_buffers = static_cast<uint32_t>(context.options.file_staging_buffers);
  // Host-backend slabs and rings live in RAM beside the pool: bounded like it, so that no
  // caller can fill the machine's memory with sessions (docs/security.md); they also count in
  // the pool's budget (host_pool, set once the pool exists), so that both share one budget.
  streams.host_budget_bytes = context.ram_budget_bytes;
  // warm_process (DDO_CACHE_PINNED_WEIGHTS): slabs stay warm for the next runner.
  streams.keep_slabs_warm = KeepsWeightsWarm(context.options);
  return streams;
}

}  // namespace

absl::StatusOr<std::unique_ptr<DaemonServer>> DaemonServer::Start(DaemonOptions options) {
  std::unique_ptr<DaemonServer> daemon(new DaemonServer());
  DaemonContext& context = daemon->context_;
  context.options = std::move(options);
  context.started = absl::Now();
  daemon->live_settings_ = std::make_unique<LiveSettings>(context.options.setting_environment);
  context.live_settings = daemon->live_settings_.get();
  const std::string& socket_path = context.options.socket_path;

  if (!context.options.socket_group.empty() &&
      ::getgrnam(context.options.socket_group.c_str()) == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("--socket-group: no group named '", context.options.socket_group, "'"));
  }
  // First, before any thread starts: sd_listen_fds removes LISTEN_* from the environment.
  DDO_ASSIGN_OR_RETURN(ActivatedSockets activated,
                       TakeActivatedSockets(socket_path));
  daemon->socket_from_systemd_ = activated.activated();
  DDO_ASSIGN_OR_RETURN(PrivateDirectory socket_directory,
                       PrivateDirectory::Open(ParentDirectory(socket_path)));
  daemon->socket_directory_.emplace(std::move(socket_directory));
  DDO_ASSIGN_OR_RETURN(InstanceLock lock,
                       InstanceLock::Acquire(*daemon->socket_directory_, socket_path));
  daemon->lock_.emplace(std::move(lock));
  if (!activated.activated()) {
    DDO_RETURN_IF_ERROR(RemoveStaleSocket(socket_path));
  }
  DDO_RETURN_IF_ERROR(EnsurePrivateDirectory(context.options.state_dir));

  const SystemInfo system = QuerySystemInfo(context.options.available_ram_override_gb,
                                            context.options.platform_override);
  context.ram_budget_bytes = RamBudgetBytes(context.options, system.memory.available_bytes);
  context.gpus = ProbeGpus();
  context.wsl = system.os == OsFlavor::kWsl;
  context.windows = system.os == OsFlavor::kWindows;
  LogMachine(context, system);

  DDO_RETURN_IF_ERROR(daemon->OpenPool(system));
  StreamSessionsOptions streams = StreamSessionsOptionsOf(context);
  // One RAM budget: host-backend sessions' slabs and rings count in the pool's.
  streams.host_pool = daemon->pool_.get();
  daemon->streams_ = std::make_unique<StreamSessions>(
      *daemon->store_, *daemon->session_registry_, *daemon->pool_, context.gpus, streams);
  // Callers identify themselves before their first RPC: the identity socket comes first.
  IdentityServerOptions identity;
  identity.socket_path = IdentitySocketPath(socket_path);
  identity.socket_group = context.options.socket_group;
  identity.limits = ConnectionLimitsOf(context.options);
  identity.descriptor_reserve = static_cast<size_t>(context.options.descriptor_reserve);
  DDO_ASSIGN_OR_RETURN(
      daemon->identity_,
      IdentityServer::Start(identity, daemon->callers_,
                            std::move(activated.identity)));
  context.identity_socket = identity.socket_path;
  LeaseLimits lease_limits;
  lease_limits.per_uid = static_cast<size_t>(context.options.max_leases_per_user);
  daemon->service_ = std::make_unique<DdoService>(context, *daemon->pool_,
                                                  *daemon->session_registry_, *daemon->store_,
                                                  *daemon->streams_, daemon->callers_,
                                                  lease_limits);
  context.bandwidth = &daemon->bandwidth_;
  DDO_RETURN_IF_ERROR(daemon->Listen(std::move(activated.grpc)));
  daemon->StartBandwidthProbe();
  daemon->StartKeepAliveReaper();
  daemon->StartHostMemoryMeter();
  return daemon;
}

absl::Status DaemonServer::OpenPool(const SystemInfo& system) {
  const DaemonOptions& options = context_.options;
  PoolOptions pool;
  pool.budget_bytes = context_.ram_budget_bytes;
  pool.name_namespace = PoolNamespace(options.socket_path);
  const bool wsl_forbids = system.os == OsFlavor::kWsl && options.disable_pin_on_wsl;
  pool.pin = options.pin_cpu_memory && !wsl_forbids &&
             context_.gpus.backend == ComputeBackend::kCuda && HostPinningAvailable();
  pool.pretouch_threads = options.pin_workers;
  pool.populate_threads = static_cast<int>(std::clamp(system.cpu_count, 2u, 16u));
  const std::string pool_dir =
      absl::StrCat(options.state_dir, "/pool-", pool.name_namespace);
  DDO_RETURN_IF_ERROR(EnsurePrivateDirectory(pool_dir));
  Logger("server")->info("host pool {}: budget {:.1f} GiB{}, {}", pool.name_namespace,
                         pool.budget_bytes / (1024.0 * 1024 * 1024),
                         options.ram_budget_scope == RamBudgetScope::kRunners
                             ? " with ddod and its runners (--ram-budget-scope runners)"
                             : "",
                         pool.pin ? "pinned" : (wsl_forbids ? "not pinned (WSL)"
                                                            : "not pinned"));
  pool_ = std::make_unique<HostPool>(pool);
  SegmentReserveOptions reserve;
  // Unset: a service that keeps weights warm (warm_process) keeps a reserve for the loads to
  // come; a private ddod, which loads once and pays for every page it makes, does not.
  if (options.prefaulted_reserve_gb.has_value()) {
    reserve.target_bytes = GiBToBytes(*options.prefaulted_reserve_gb);
  } else if (KeepsWeightsWarm(options)) {
    reserve.target_bytes = std::min(pool.budget_bytes / 4, GiBToBytes(8));
  }
  reserve_ = std::make_unique<SegmentReserve>(*pool_, reserve);
  StoreOptions store;
  store.reserve = reserve_.get();
  store.manifest_path = absl::StrCat(pool_dir, "/manifest.json");
  store_manifest_path_ = store.manifest_path;
  store.read_threads = static_cast<int>(std::clamp(system.cpu_count, 2u, 16u));
  store.max_uploads_per_uid = static_cast<size_t>(options.max_uploads_per_user);
  store.max_bytes_per_uid = options.max_user_pool_gb ? GiBToBytes(*options.max_user_pool_gb) : 0;
  store.spill_budget_bytes =
      options.spill_budget_gb ? GiBToBytes(*options.spill_budget_gb) : pool.budget_bytes;
  store.max_spill_bytes_per_uid =
      options.max_user_spill_gb ? GiBToBytes(*options.max_user_spill_gb) : 0;
  if (store.spill_budget_bytes > 0) {
    store.spill_directory = absl::StrCat(options.state_dir, "/spill");
    DDO_RETURN_IF_ERROR(EnsurePrivateDirectory(store.spill_directory));
  }
  // File-tier components keep descriptors: at most a quarter of what this process may open.
  const size_t descriptors =
      DescriptorReserve::ForThisProcess(static_cast<size_t>(options.descriptor_reserve)).limit();
  store.max_backing_files = std::clamp<size_t>(descriptors / 4, 16, store.max_backing_files);
  session_registry_ =
      std::make_unique<SessionRegistry>(static_cast<size_t>(options.max_sessions_per_user));
  store_ = std::make_unique<ComponentStore>(*pool_, *session_registry_, store);
  store_->AdoptPrevious();
  // After the adoption: what a previous ddod left comes first.
  reserve_->Start();
  if (reserve_->target_bytes() > 0) {
    Logger("server")->info("pre-faulted reserve: {} (--prefaulted-reserve-gb)",
                           FormatBytes(reserve_->target_bytes()));
  }
  return absl::OkStatus();
}

absl::Status DaemonServer::Listen(UniqueFd inherited_socket) {
  const DaemonOptions& options = context_.options;
  const std::string unix_target = absl::StrCat("unix:", options.socket_path);

  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  grpc::ResourceQuota quota("ddod");
  quota.SetMaxThreads(kMaxServerThreads);
  builder.SetResourceQuota(quota);
  builder.SetMaxReceiveMessageSize(kMaxMessageBytes);
  builder.SetMaxSendMessageSize(kMaxMessageBytes);
  // No socket is gRPC's to listen on: the gates below accept on the Unix socket and on the
  // TCP port of --listen, and hand gRPC what they admit.
  std::optional<TcpListener> tcp;
  if (!options.listen_address.empty()) {
    DDO_ASSIGN_OR_RETURN(tcp, ListenOnTcp(options.listen_address));
  }
  builder.RegisterService(service_.get());
  server_ = builder.BuildAndStart();
  if (server_ == nullptr) {
    return absl::UnavailableError("could not start the gRPC server (see the gRPC error above)");
  }
  const bool inherited = inherited_socket.valid();
  UniqueFd listener = std::move(inherited_socket);
  if (!inherited) {
    DDO_ASSIGN_OR_RETURN(listener, ListenOnUnixSocket(options.socket_path));
    DDO_RETURN_IF_ERROR(SetSocketPermissions());
  }  // else systemd bound the socket and set its owner, group and mode (ddod.socket)
  ConnectionGateOptions gate;
  gate.limits = ConnectionLimitsOf(options);
  gate.descriptor_reserve = static_cast<size_t>(options.descriptor_reserve);
  DDO_ASSIGN_OR_RETURN(grpc_gate_, ConnectionGate::Start(std::move(listener), gate,
                                                         ConnectionGate::ToGrpcServer(*server_)));
  if (tcp.has_value()) {
    ConnectionGateOptions tcp_gate = gate;
    tcp_gate.what = "TCP port";
    tcp_gate.tcp = true;
    DDO_ASSIGN_OR_RETURN(tcp_gate_, ConnectionGate::Start(std::move(tcp->fd), tcp_gate,
                                                          ConnectionGate::ToGrpcServer(*server_)));
  }

  context_.listen_addresses.push_back(unix_target);
  if (!options.listen_address.empty()) {
    const std::string host = options.listen_address.substr(0, options.listen_address.rfind(':'));
    context_.listen_addresses.push_back(absl::StrCat(host, ":", tcp->port));
  }
  grpc::HealthCheckServiceInterface* health = server_->GetHealthCheckService();
  health->SetServingStatus(true);
  health->SetServingStatus(kServiceName, true);
  for (const std::string& address : context_.listen_addresses) {
    Logger("server")->info("serving on {}{}", address,
                           inherited && address == unix_target ? " (socket from systemd)" : "");
  }
  const DescriptorReserve reserve =
      DescriptorReserve::ForThisProcess(static_cast<size_t>(options.descriptor_reserve));
  Logger("server")->info(
      "connections to each Unix socket: {} per user, {} in all; {} of {} descriptors kept for "
      "ddod's own work", gate.limits.per_uid, gate.limits.in_all, reserve.reserve(),
      reserve.limit());
  return absl::OkStatus();
}

void DaemonServer::StartBandwidthProbe() {
  if (context_.gpus.devices.empty()) {
    return;
  }
  bandwidth_probe_ = std::thread([this] {
    for (const GpuDevice& gpu : context_.gpus.devices) {
      absl::StatusOr<double> gbps = MeasurePinnedH2DGbps(gpu.ordinal);
      if (!gbps.ok()) {
        Logger("platform")->warn("could not measure {}: {}", gpu.uuid, gbps.status().message());
        continue;
      }
      bandwidth_.Set(gpu.ordinal, *gbps);
      Logger("platform")->info("device {}: pinned host-to-device {:.1f} GB/s", gpu.ordinal,
                               *gbps);
    }
  });
}

absl::Status DaemonServer::SetSocketPermissions() const {
  const DaemonOptions& options = context_.options;
  if (options.socket_group.empty()) {
    return absl::OkStatus();  // already 0600 through the umask
  }
  const group* entry = ::getgrnam(options.socket_group.c_str());
  if (entry == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("--socket-group: no group named '", options.socket_group, "'"));
  }
  // Relative to the checked directory, never through a link: only the socket gRPC just bound.
  const PrivateDirectory& directory = *socket_directory_;
  const std::string name = LastComponent(options.socket_path);
  struct stat info {};
  if (::fstatat(directory.fd(), name.c_str(), &info, AT_SYMLINK_NOFOLLOW) != 0 ||
      !S_ISSOCK(info.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat(options.socket_path, " is not the socket ddod bound"));
  }
  if (::fchownat(directory.fd(), name.c_str(), static_cast<uid_t>(-1), entry->gr_gid,
                 AT_SYMLINK_NOFOLLOW) != 0) {
    return PosixError(absl::StrCat("chown ", options.socket_path, " to group ",
                                   options.socket_group),
                      errno);
  }
  if (::fchmodat(directory.fd(), name.c_str(), 0660, 0) != 0) {
    return PosixError(absl::StrCat("chmod 0660 ", options.socket_path), errno);
  }
  // The group must also be able to reach the socket through its directory. ddod opens that
  // directory to the group only when it made it just now; a directory it found (systemd's
  // RuntimeDirectory, /run, a user's directory) is the administrator's to set up, and is only
  // checked.
  if (directory.created()) {
    if (::fchown(directory.fd(), static_cast<uid_t>(-1), entry->gr_gid) != 0 ||
        ::fchmod(directory.fd(), 0750) != 0) {
      return PosixError(
          absl::StrCat("open ", directory.path(), " to group ", options.socket_group), errno);
    }
    return absl::OkStatus();
  }
  if (::fstat(directory.fd(), &info) != 0) {
    return PosixError(absl::StrCat("stat ", directory.path()), errno);
  }
  const bool group_can_enter = (info.st_mode & S_IXOTH) != 0 ||
                               ((info.st_mode & S_IXGRP) != 0 && info.st_gid == entry->gr_gid);
  if (!group_can_enter) {
    Logger("server")->warn(
        "members of group {} cannot enter {} to reach the socket; give the directory to that "
        "group with mode 0750 (systemd: RuntimeDirectoryMode=0750 and Group=)",
        options.socket_group, directory.path());
  }
  return absl::OkStatus();
}

void DaemonServer::StartKeepAliveReaper() {
  {
    absl::MutexLock lock(&reaper_mu_);
    keep_alive_ = context_.options.keep_alive;
  }
  keep_alive_reaper_ = std::thread([this] {
    for (;;) {
      absl::Duration keep;
      {
        absl::MutexLock lock(&reaper_mu_);
        if (reaper_mu_.AwaitWithTimeout(absl::Condition(&reaper_stop_), absl::Seconds(1))) return;
        keep = keep_alive_;
      }
      store_->EvictIdle(absl::Now(), keep);
    }
  });
}

void DaemonServer::StartHostMemoryMeter() {
  if (context_.options.ram_budget_scope != RamBudgetScope::kRunners) return;
  MeterSources sources;
  sources.runner_pids = [this] {
    std::vector<int64_t> pids;
    for (const Lease& lease : service_->leases().List()) pids.push_back(lease.client_pid);
    return pids;
  };
  sources.uploading_bytes = [this] { return store_->UploadingBytesByPid(); };
  sources.read_process = [](int64_t pid) {
    return ReadProcessFootprint(static_cast<pid_t>(pid));
  };
  sources.read_own = [] { return ReadOwnFootprint(); };
  MeterOptions meter;
  meter.derived_budget = !context_.options.ram_budget_gb.has_value();
  memory_meter_ = std::make_unique<HostMemoryMeter>(*pool_, std::move(sources), meter);
  memory_meter_->Start();
}

void DaemonServer::StopKeepAliveReaper() {
  {
    absl::MutexLock lock(&reaper_mu_);
    reaper_stop_ = true;
  }
  if (keep_alive_reaper_.joinable()) keep_alive_reaper_.join();
}

std::vector<std::string> DaemonServer::Reload(const DaemonOptions& fresh) {
  auto log = Logger("server");
  DaemonOptions& running = context_.options;
  if (fresh.keep_alive != running.keep_alive) {
    log->info("keep-alive {} -> {}", absl::FormatDuration(running.keep_alive),
              absl::FormatDuration(fresh.keep_alive));
    absl::MutexLock lock(&reaper_mu_);
    keep_alive_ = fresh.keep_alive;
    running.keep_alive = fresh.keep_alive;
  }
  if (fresh.log_level != running.log_level || fresh.log_format != running.log_format) {
    log->info("log level {} -> {}, format {} -> {}",
              spdlog::level::to_string_view(running.log_level),
              spdlog::level::to_string_view(fresh.log_level), LogFormatName(running.log_format),
              LogFormatName(fresh.log_format));
    InitLogging(fresh.log_level, fresh.log_format);
    running.log_level = fresh.log_level;
    running.log_format = fresh.log_format;
  }
  if (fresh.setting_environment != *live_settings_->Snapshot()) {
    log->info("DDO_* settings layer reloaded ({} setting(s))", fresh.setting_environment.size());
    live_settings_->Replace(fresh.setting_environment);
  }
  // The rest shapes what ddod opened at start (sockets, pool, devices, limits).
  std::vector<std::string> need_restart;
  auto differs = [&need_restart](const char* name, bool changed) {
    if (changed) need_restart.push_back(name);
  };
  differs("preset", fresh.preset != running.preset);
  differs("socket", fresh.socket_path != running.socket_path);
  differs("listen", fresh.listen_address != running.listen_address);
  differs("socket-group", fresh.socket_group != running.socket_group);
  differs("ram-budget-gb", fresh.ram_budget_gb != running.ram_budget_gb);
  differs("ram-budget-scope", fresh.ram_budget_scope != running.ram_budget_scope);
  differs("vram-budget-gb", fresh.vram_budget_gb != running.vram_budget_gb);
  differs("DDO_SYSTEM_RAM_HEADROOM_GB",
          fresh.system_ram_headroom_gb != running.system_ram_headroom_gb);
  differs("state-dir", fresh.state_dir != running.state_dir);
  differs("host-devices", fresh.host_devices != running.host_devices);
  differs("max-leases-per-user", fresh.max_leases_per_user != running.max_leases_per_user);
  differs("max-uploads-per-user", fresh.max_uploads_per_user != running.max_uploads_per_user);
  differs("max-sessions-per-user",
          fresh.max_sessions_per_user != running.max_sessions_per_user);
  differs("max-user-pool-gb", fresh.max_user_pool_gb != running.max_user_pool_gb);
  differs("spill-budget-gb", fresh.spill_budget_gb != running.spill_budget_gb);
  differs("max-user-spill-gb", fresh.max_user_spill_gb != running.max_user_spill_gb);
  differs("prefaulted-reserve-gb",
          fresh.prefaulted_reserve_gb != running.prefaulted_reserve_gb);
  differs("max-connections-per-user",
          fresh.max_connections_per_user != running.max_connections_per_user);
  differs("max-connections", fresh.max_connections != running.max_connections);
  differs("descriptor-reserve", fresh.descriptor_reserve != running.descriptor_reserve);
  differs("DDO_PIN_CPU_MEMORY", fresh.pin_cpu_memory != running.pin_cpu_memory);
  differs("DDO_PIN_CPU_WORKERS", fresh.pin_workers != running.pin_workers);
  differs("DDO_FILE_READ_THREADS", fresh.file_read_threads != running.file_read_threads);
  differs("DDO_FILE_STAGING_BUFFERS",
          fresh.file_staging_buffers != running.file_staging_buffers);
  auto cache_pinned = [](const DaemonOptions& options) {
    auto it = options.setting_environment.find("DDO_CACHE_PINNED_WEIGHTS");
    return it == options.setting_environment.end() ? std::string() : it->second;
  };
  differs("DDO_CACHE_PINNED_WEIGHTS", cache_pinned(fresh) != cache_pinned(running));
  for (const std::string& name : need_restart) {
    log->warn("{} changed in the configuration; it takes effect at the next start", name);
  }
  return need_restart;
}

std::string DaemonServer::StatusLine() const {
  const StoreStats stats = store_->Stats();
  return absl::StrCat("serving on ", absl::StrJoin(context_.listen_addresses, ", "), "; pool ",
                      FormatBytes(stats.used_bytes), " of ",
                      FormatBytes(context_.ram_budget_bytes), " in ", stats.components,
                      " component(s)");
}

void DaemonServer::Shutdown(const std::string& reason) {
  if (stopped_ || server_ == nullptr) {
    return;  // never started: the lock (if any) is released by its own destructor
  }
  stopped_ = true;
  auto log = Logger("server");
  log->info("shutting down: {}", reason);
  if (bandwidth_probe_.joinable()) {
    bandwidth_probe_.join();  // a few hundred milliseconds at most
  }
  StopKeepAliveReaper();
  if (memory_meter_ != nullptr) memory_meter_->Stop();
  if (server_ != nullptr) {
    // Health first, so that watchers and load balancers stop sending work.
    server_->GetHealthCheckService()->Shutdown();
  }
  if (service_ != nullptr) {
    service_->BeginShutdown(reason);
  }
  if (server_ != nullptr) {
    // Let running handlers finish (leases end within their poll interval), then stop at once:
    // gRPC's own graceful shutdown would also wait for idle client connections to close.
    const absl::Time give_up = absl::Now() + kShutdownGrace;
    while (service_->in_flight() > 0 && absl::Now() < give_up) {
      absl::SleepFor(absl::Milliseconds(10));
    }
    if (const int running = service_->in_flight(); running > 0) {
      log->warn("cancelling {} call(s) still running after {}", running,
                absl::FormatDuration(kShutdownGrace));
    }
    if (grpc_gate_ != nullptr) grpc_gate_->Stop();  // before the server they feed
    if (tcp_gate_ != nullptr) tcp_gate_->Stop();
    server_->Shutdown(std::chrono::system_clock::now());
    server_->Wait();
    // ~grpc::Server ends with grpc_shutdown, whose executor thread can first sit out a pending
    // timer (10 s seen after clients that took large answers): the stopped server, which
    // serves nothing any more, is left to the process's exit instead of making a stop wait.
    (void)server_.release();
  }
  if (identity_ != nullptr) identity_->Stop();
  if (streams_ != nullptr) streams_->CloseAll();
  if (store_ != nullptr) {
    store_->Close(context_.options.discard_pool);
    if (context_.options.discard_pool) {
      ::rmdir(ParentDirectory(store_manifest_path_).c_str());  // empty once the manifest is gone
    }
    log->info(context_.options.discard_pool ? "pool discarded"
                                            : "pool kept for the next ddod (--discard removes it)");
  }
  const std::string& socket_path = context_.options.socket_path;
  if (lock_.has_value()) {
    // Only the lock holder may remove the socket: it is ours, unless systemd made it (then
    // connections wait in it for the next start).
    if (!socket_from_systemd_) {
      ::unlinkat(socket_directory_->fd(), LastComponent(socket_path).c_str(), 0);
    }
    lock_->Release();
    if (context_.options.parent_pid.has_value()) {
      // An embedded daemon's directory is private to it and its client; rmdir only succeeds
      // when nothing else was left there.
      ::rmdir(ParentDirectory(socket_path).c_str());
    }
  }
  log->info("stopped");
}

DaemonServer::~DaemonServer() { Shutdown("daemon object destroyed"); }

}  // namespace ddo
