// File: daemon/service/daemon_context.h
//
// What ddod decided at start and what the handlers read: resolved options, the GPU inventory
// (probed once), where it listens, when it started. Immutable after construction, so handlers
// share it without locks.
//
// Thread-safety: immutable after construction, shared by every handler thread without locks;
// the bandwidth board and the live settings it points to lock themselves.
#ifndef DDO_DAEMON_SERVICE_DAEMON_CONTEXT_H_
#define DDO_DAEMON_SERVICE_DAEMON_CONTEXT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "daemon/config/daemon_options.h"
#include "daemon/config/live_settings.h"
#include "daemon/platform/bandwidth_board.h"
#include "daemon/platform/gpu_inventory.h"

namespace ddo {

struct DaemonContext {
  DaemonOptions options;
  GpuInventory gpus;
  // gRPC target strings: "unix:/run/ddo/ddod.sock", "127.0.0.1:50051".
  std::vector<std::string> listen_addresses;
  uint64_t ram_budget_bytes = 0;
  absl::Time started;
  // Filled in the background after start; thread-safe, owned by the server. May be null.
  const BandwidthBoard* bandwidth = nullptr;
  // Platform facts the settings rules depend on (WSL: no pinning, no group-offload streams).
  bool wsl = false;
  bool windows = false;
  // Where callers prove who they are (docs/security.md).
  std::string identity_socket;
  // ddod's DDO_* settings layer as a SIGHUP reload leaves it (owned by the server); null:
  // options.setting_environment, as at start.
  const LiveSettings* live_settings = nullptr;

  // The settings layer requests resolve against now.
  std::shared_ptr<const LiveSettings::Layer> SettingLayer() const {
    return live_settings != nullptr
               ? live_settings->Snapshot()
               : std::make_shared<const LiveSettings::Layer>(options.setting_environment);
  }
};

}  // namespace ddo

#endif  // DDO_DAEMON_SERVICE_DAEMON_CONTEXT_H_
