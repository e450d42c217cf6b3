// File: daemon/server/service_notifier.h
//
// Tells systemd how ddod is doing when it runs as a Type=notify service (sd_notify(3), from
// libsystemd): READY=1 once it serves, STATUS= lines a person reads in `systemctl status`,
// RELOADING=1 and READY=1 around a SIGHUP reload, STOPPING=1 at shutdown, and WATCHDOG=1 every
// half watchdog interval (WatchdogSec=) while a health check through ddod's own socket answers
// SERVING: a ddod whose gRPC server no longer answers stops pinging, and systemd restarts it.
// Without NOTIFY_SOCKET (not under systemd) every call does nothing.
//
// Thread-safety: every method may be called from any thread.
#ifndef DDO_DAEMON_SERVER_SERVICE_NOTIFIER_H_
#define DDO_DAEMON_SERVER_SERVICE_NOTIFIER_H_

#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace ddo {

class ServiceNotifier {
 public:
  // `health_target`: the gRPC target the watchdog checks ("unix:/run/ddo/ddod.sock").
  explicit ServiceNotifier(std::string health_target);
  ServiceNotifier(const ServiceNotifier&) = delete;
  ServiceNotifier& operator=(const ServiceNotifier&) = delete;
  // Stops the watchdog thread.
  ~ServiceNotifier();

  // READY=1 with a STATUS line; starts the watchdog when systemd asked for one.
  void Ready(absl::string_view status);
  void Status(absl::string_view status);
  // RELOADING=1 (with MONOTONIC_USEC, as Type=notify-reload wants); Ready() ends it.
  void Reloading();
  // STOPPING=1 with a STATUS line; the watchdog stops pinging.
  void Stopping(absl::string_view status);

  // Whether systemd listens (NOTIFY_SOCKET is set).
  bool enabled() const { return enabled_; }
  // The watchdog interval systemd asked for, or zero.
  absl::Duration watchdog_interval() const { return watchdog_interval_; }

 private:
  void Send(const std::string& message) const;
  void WatchdogLoop();
  bool Healthy() const;
  absl::Duration Period() const;
  absl::Duration HealthDeadline() const;

  const std::string health_target_;
  const bool enabled_;
  absl::Duration watchdog_interval_ = absl::ZeroDuration();
  absl::Mutex mutex_;
  bool stopping_ ABSL_GUARDED_BY(mutex_) = false;
  std::thread watchdog_;
};

}  // namespace ddo

#endif  // DDO_DAEMON_SERVER_SERVICE_NOTIFIER_H_
