#include "daemon/server/service_notifier.h"

#include <grpcpp/grpcpp.h>
#include <systemd/sd-daemon.h>
#include <time.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "daemon/common/logging.h"
#include "ddo/wire/display_text.h"
#include "grpc/health/v1/health.grpc.pb.h"

namespace ddo {
namespace {

// STATUS= is one line: no newline may end it early.
std::string OneLine(absl::string_view text) { return EscapeForDisplay(text, 400); }

uint64_t MonotonicMicros() {
  timespec now{};
  ::clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<uint64_t>(now.tv_sec) * 1000000u + static_cast<uint64_t>(now.tv_nsec) / 1000u;
}

}  // namespace

ServiceNotifier::ServiceNotifier(std::string health_target)
    : health_target_(std::move(health_target)), enabled_(std::getenv("NOTIFY_SOCKET") != nullptr) {
  uint64_t micros = 0;
  // > 0 when WATCHDOG_USEC is set (and WATCHDOG_PID, if set, is this process).
  if (enabled_ && sd_watchdog_enabled(/*unset_environment=*/0, &micros) > 0 && micros > 0) {
    watchdog_interval_ = absl::Microseconds(static_cast<int64_t>(micros));
  }
}

ServiceNotifier::~ServiceNotifier() {
  {
    absl::MutexLock lock(&mutex_);
    stopping_ = true;
  }
  if (watchdog_.joinable()) watchdog_.join();
}

void ServiceNotifier::Send(const std::string& message) const {
  if (!enabled_) return;
  if (const int result = sd_notify(/*unset_environment=*/0, message.c_str()); result < 0) {
    Logger("server")->warn("sd_notify failed: {}", std::strerror(-result));
  }
}

void ServiceNotifier::Ready(absl::string_view status) {
  Send(absl::StrCat("READY=1\nSTATUS=", OneLine(status)));
  absl::MutexLock lock(&mutex_);
  if (watchdog_interval_ > absl::ZeroDuration() && !watchdog_.joinable() && !stopping_) {
    watchdog_ = std::thread([this] { WatchdogLoop(); });
  }
}

void ServiceNotifier::Status(absl::string_view status) {
  Send(absl::StrCat("STATUS=", OneLine(status)));
}

void ServiceNotifier::Reloading() {
  Send(absl::StrCat("RELOADING=1\nMONOTONIC_USEC=", MonotonicMicros(),
                    "\nSTATUS=reloading the configuration"));
}

void ServiceNotifier::Stopping(absl::string_view status) {
  {
    absl::MutexLock lock(&mutex_);
    stopping_ = true;
  }
  Send(absl::StrCat("STOPPING=1\nSTATUS=", OneLine(status)));
}

bool ServiceNotifier::Healthy() const {
  auto channel = grpc::CreateChannel(health_target_, grpc::InsecureChannelCredentials());
  auto health = grpc::health::v1::Health::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + HealthDeadline()));
  grpc::health::v1::HealthCheckRequest request;
  grpc::health::v1::HealthCheckResponse response;
  const grpc::Status status = health->Check(&context, request, &response);
  return status.ok() && response.status() == grpc::health::v1::HealthCheckResponse::SERVING;
}

absl::Duration ServiceNotifier::Period() const {
  // Half the interval, as sd_watchdog_enabled(3) advises; never a busy loop, whatever
  // WATCHDOG_USEC says (systemd's own minimum is far above this).
  return std::max(watchdog_interval_ / 2, absl::Milliseconds(100));
}

absl::Duration ServiceNotifier::HealthDeadline() const {
  return std::clamp(watchdog_interval_ / 4, absl::Milliseconds(50), Period() / 2);
}

void ServiceNotifier::WatchdogLoop() {
  const absl::Duration period = Period();
  bool healthy = true;
  for (;;) {
    {
      absl::MutexLock lock(&mutex_);
      if (mutex_.AwaitWithTimeout(absl::Condition(&stopping_), period)) return;
    }
    const bool now_healthy = Healthy();
    if (now_healthy) Send("WATCHDOG=1");
    if (now_healthy != healthy) {  // said once per change, not at every ping
      if (now_healthy) {
        Logger("server")->info("watchdog: ddod's own health check answers again");
      } else {
        Logger("server")->warn("watchdog: ddod's own health check failed; not pinging systemd");
      }
      healthy = now_healthy;
    }
  }
}

}  // namespace ddo
