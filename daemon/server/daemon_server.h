// File: daemon/server/daemon_server.h
//
// ddod's serving lifecycle: take the socket's instance lock, replace a stale socket, listen
// on the Unix socket (owner-only, or group with --socket-group; or the one systemd passed, see
// socket_activation.h) through a ConnectionGate (connection limits, connection_gate.h) and
// optionally on loopback TCP,
// serve ddo.v1.Ddo and grpc.health.v1.Health, and shut down gracefully: health NOT_SERVING,
// new requests refused, leases told and released, in-flight calls finished, socket removed.
//
// Thread-safety: Start and Shutdown are called from one thread (main, or a test).
#ifndef DDO_DAEMON_SERVER_DAEMON_SERVER_H_
#define DDO_DAEMON_SERVER_DAEMON_SERVER_H_

#include <grpcpp/server.h>

#include <memory>
#include <thread>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

#include "absl/status/statusor.h"
#include "daemon/config/daemon_options.h"
#include "daemon/identity/caller_registry.h"
#include "daemon/identity/identity_server.h"
#include "daemon/platform/system_info.h"
#include "daemon/server/connection_gate.h"
#include "daemon/server/host_memory_meter.h"
#include "daemon/server/instance_lock.h"
#include "daemon/service/daemon_context.h"
#include "daemon/pool/host_pool.h"
#include "daemon/pool/segment_reserve.h"
#include "daemon/service/ddo_service.h"
#include "daemon/store/component_store.h"

namespace ddo {

class DaemonServer {
 public:
  // Starts serving. AlreadyExists when another ddod holds the socket; other errors say which
  // path or address failed and why.
  static absl::StatusOr<std::unique_ptr<DaemonServer>> Start(DaemonOptions options);

  DaemonServer(const DaemonServer&) = delete;
  DaemonServer& operator=(const DaemonServer&) = delete;
  ~DaemonServer();

  // Graceful shutdown; idempotent.
  void Shutdown(const std::string& reason);

  // Applies what `fresh` (options resolved again, after a SIGHUP) changes that can change while
  // ddod runs: the log level and the DDO_* settings layer requests resolve against. Returns the
  // names of the other options that differ: they take effect at the next start (logged).
  std::vector<std::string> Reload(const DaemonOptions& fresh);

  // One line for `systemctl status`: where ddod serves, its pool, what it holds.
  std::string StatusLine() const;

  const DaemonContext& context() const { return context_; }
  const DdoService& service() const { return *service_; }
  const ComponentStore& store() const { return *store_; }

 private:
  DaemonServer() = default;

  absl::Status OpenPool(const SystemInfo& system);
  // Serves on --socket, or on `inherited_socket` when systemd passed it (socket activation).
  absl::Status Listen(UniqueFd inherited_socket);
  // Measures each device's pinned H2D bandwidth on a background thread.
  void StartBandwidthProbe();
  // Evicts components unused for longer than their keep-alive, once a second, until Shutdown.
  void StartKeepAliveReaper();
  void StopKeepAliveReaper();
  // Counts ddod's and its runners' private memory in the RAM budget (--ram-budget-scope
  // runners), until Shutdown.
  void StartHostMemoryMeter();
  // Lets --socket-group members reach the socket: the socket file itself, and its directory
  // only when ddod created that directory at this start (never /run or a user's directory).
  absl::Status SetSocketPermissions() const;

  // Destroyed in reverse order: the server, the service, the streams, the store, the session
  // registry, the pre-faulted reserve, then the pool.
  DaemonContext context_;
  std::unique_ptr<LiveSettings> live_settings_;
  std::unique_ptr<HostPool> pool_;
  std::unique_ptr<SegmentReserve> reserve_;  // goes before the pool, after the store
  std::unique_ptr<SessionRegistry> session_registry_;
  std::unique_ptr<ComponentStore> store_;
  std::unique_ptr<StreamSessions> streams_;
  CallerRegistry callers_;
  std::unique_ptr<IdentityServer> identity_;
  std::unique_ptr<DdoService> service_;
  std::unique_ptr<HostMemoryMeter> memory_meter_;  // reads the service's leases
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<ConnectionGate> grpc_gate_;  // accepts on the Unix socket
  std::unique_ptr<ConnectionGate> tcp_gate_;   // on the TCP port of --listen, if any
  bool socket_from_systemd_ = false;
  // The socket's checked directory, held open: the lock file and the socket's permissions are
  // handled relative to it (runtime_dir.h).
  std::optional<PrivateDirectory> socket_directory_;
  std::optional<InstanceLock> lock_;
  BandwidthBoard bandwidth_;
  std::thread bandwidth_probe_;
  absl::Mutex reaper_mu_;
  bool reaper_stop_ ABSL_GUARDED_BY(reaper_mu_) = false;
  absl::Duration keep_alive_ ABSL_GUARDED_BY(reaper_mu_) = absl::InfiniteDuration();
  std::thread keep_alive_reaper_;
  std::string store_manifest_path_;
  bool stopped_ = false;
};

}  // namespace ddo

#endif  // DDO_DAEMON_SERVER_DAEMON_SERVER_H_
