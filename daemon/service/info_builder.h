// File: daemon/service/info_builder.h
//
// Builds the DaemonInfo message from the daemon context and a fresh look at the system.
//
// Thread-safety: any thread (the GetInfo and Connect handlers call it concurrently); it reads
// the immutable context and queries the devices' free memory.
#ifndef DDO_DAEMON_SERVICE_INFO_BUILDER_H_
#define DDO_DAEMON_SERVICE_INFO_BUILDER_H_

#include "daemon/platform/system_info.h"
#include "daemon/service/daemon_context.h"
#include "ddo/v1/info.pb.h"

namespace ddo {

// `system` is read by the caller (QuerySystemInfo) so tests can pass fixed facts. Free device
// memory is queried here; a device that cannot be queried reports free_bytes 0.
ddo::v1::DaemonInfo BuildDaemonInfo(const DaemonContext& context, const SystemInfo& system);

}  // namespace ddo

#endif  // DDO_DAEMON_SERVICE_INFO_BUILDER_H_
