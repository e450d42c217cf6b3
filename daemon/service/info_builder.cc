#include "daemon/service/info_builder.h"

#include <unistd.h>

#include "daemon/common/logging.h"
#include "daemon/common/version.h"
#include "daemon/config/budgets.h"

namespace ddo {
namespace {

ddo::v1::OsKind ToProto(OsFlavor flavor) {
  switch (flavor) {
    case OsFlavor::kLinux:
      return ddo::v1::OS_KIND_LINUX;
    case OsFlavor::kWsl:
      return ddo::v1::OS_KIND_WSL;
    case OsFlavor::kWindows:
      return ddo::v1::OS_KIND_WINDOWS;
    case OsFlavor::kOther:
      break;
  }
  return ddo::v1::OS_KIND_OTHER;
}

}  // namespace

ddo::v1::DaemonInfo BuildDaemonInfo(const DaemonContext& context, const SystemInfo& system) {
  ddo::v1::DaemonInfo info;
  info.set_version(kVersion);
  info.set_api_version(kApiVersion);
  info.set_pid(::getpid());

  auto* platform = info.mutable_platform();
  platform->set_os(ToProto(system.os));
  platform->set_os_release(system.os_release);
  platform->set_hostname(system.hostname);
  platform->set_cpu_count(system.cpu_count);
  platform->set_ram_total_bytes(system.memory.total_bytes);
  platform->set_ram_available_bytes(system.memory.available_bytes);
  platform->set_ram_available_overridden(system.available_overridden);

  info.set_backend(context.gpus.backend == ComputeBackend::kCuda ? ddo::v1::BACKEND_CUDA
                                                                 : ddo::v1::BACKEND_HOST);
  info.set_backend_detail(context.gpus.detail);
  for (const GpuDevice& gpu : context.gpus.devices) {
    auto* device = info.add_devices();
    device->set_uuid(gpu.uuid);
    device->set_ordinal(gpu.ordinal);
    device->set_name(gpu.name);
    device->set_total_bytes(gpu.total_bytes);
    device->set_compute_capability(gpu.compute_capability);
    device->set_pci_bus_id(gpu.pci_bus_id);
    device->set_vram_budget_bytes(VramBudgetBytes(context.options, gpu.total_bytes));
    if (context.bandwidth != nullptr) {
      device->set_h2d_gbps(context.bandwidth->Get(gpu.ordinal));
    }
    if (auto free_bytes = QueryFreeBytes(gpu.ordinal); free_bytes.ok()) {
      device->set_free_bytes(*free_bytes);
    } else {
      Logger("platform")->warn("{}: {}", gpu.uuid, free_bytes.status().message());
    }
  }

  info.set_requested_preset(context.options.requested_preset);
  info.set_effective_preset(context.options.preset != nullptr ? context.options.preset->name
                                                              : "");
  info.set_ram_budget_bytes(context.ram_budget_bytes);
  info.set_ram_budget_counts_runners(context.options.ram_budget_scope ==
                                     RamBudgetScope::kRunners);
  for (const std::string& address : context.listen_addresses) {
    info.add_listen_addresses(address);
  }
  info.set_state_dir(context.options.state_dir);
  info.set_started_unix_ms(absl::ToUnixMillis(context.started));
  info.set_uptime_seconds(absl::ToDoubleSeconds(absl::Now() - context.started));
  info.set_embedded(context.options.parent_pid.has_value());
  info.set_parent_pid(context.options.parent_pid.value_or(0));
  info.set_identity_socket(context.identity_socket);
  info.set_uid(::geteuid());
  return info;
}

}  // namespace ddo
