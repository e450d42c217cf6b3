#include "lease.h"

#include <unistd.h>

#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ddo {

absl::StatusOr<std::unique_ptr<Lease>> Lease::Open(ddo::v1::Ddo::Stub& stub,
                                                    const std::string& token,
                                                    const std::string& client_name,
                                                    double timeout_seconds) {
  std::unique_ptr<Lease> lease(new Lease());
  lease->context_.AddMetadata("ddo-token", token);
  ddo::v1::ConnectRequest request;
  request.set_client_pid(::getpid());
  request.set_client_name(client_name);
  lease->reader_ = stub.Connect(&lease->context_, request);
  lease->thread_ = std::thread([raw = lease.get()] { raw->Consume(); });

  std::unique_lock<std::mutex> lock(lease->mutex_);
  const bool answered = lease->changed_.wait_for(
      lock, std::chrono::duration<double>(timeout_seconds),
      [&] { return lease->confirmed_ || lease->ended_; });
  if (lease->confirmed_) {
    lease->lease_id_ = lease->pending_id_;
    return lease;
  }
  absl::Status why;
  if (!answered) {
    why = absl::DeadlineExceededError(
        absl::StrFormat("ddod did not confirm the lease within %g s", timeout_seconds));
  } else if (!lease->failure_.ok()) {
    why = lease->failure_;
  } else {
    why = absl::UnavailableError(absl::StrCat("ddod did not grant a lease: ",
                                              lease->lost_reason_));
  }
  lock.unlock();
  return why;  // the destructor cancels the stream and joins the thread
}

Lease::~Lease() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    closing_ = true;
  }
  context_.TryCancel();
  if (thread_.joinable()) thread_.join();
}

bool Lease::shutting_down() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return shutting_down_;
}

std::string Lease::lost_reason() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return lost_reason_;
}

void Lease::Consume() {
  ddo::v1::ConnectEvent event;
  while (reader_->Read(&event)) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (event.has_connected()) {
      pending_id_ = event.connected().lease_id();
      confirmed_ = true;
      changed_.notify_all();
    } else if (event.has_shutting_down()) {
      shutting_down_ = true;
      lost_reason_ = event.shutting_down().reason().empty() ? "ddod is shutting down"
                                                             : event.shutting_down().reason();
    }
    // Event kinds added by newer daemons are ignored.
  }
  const grpc::Status status = reader_->Finish();
  std::lock_guard<std::mutex> lock(mutex_);
  if (!status.ok()) {
    failure_ = absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                            status.error_message());
  }
  if (!closing_ && lost_reason_.empty()) {
    lost_reason_ = status.ok() ? std::string("ddod ended the lease stream")
                               : absl::StrCat("the lease stream failed (",
                                              absl::StatusCodeToString(failure_.code()), ": ",
                                              status.error_message(), ")");
  }
  ended_ = true;
  changed_.notify_all();
}

}  // namespace ddo
