#include "channel.h"

#include <chrono>

#include "ddo/wire/connect_to_daemon.h"
#include "grpc/health/v1/health.grpc.pb.h"

namespace ddo {
namespace {

using grpc::health::v1::HealthCheckResponse;

}  // namespace

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& target) {
  return MakeDaemonChannel(target);
}

void SetDeadline(grpc::ClientContext* context, double seconds) {
  context->set_deadline(std::chrono::system_clock::now() +
                        std::chrono::duration_cast<std::chrono::system_clock::duration>(
                            std::chrono::duration<double>(seconds)));
}

absl::StatusOr<std::string> CheckHealth(const std::shared_ptr<grpc::Channel>& channel,
                                        const std::string& service, double timeout_seconds) {
  auto stub = grpc::health::v1::Health::NewStub(channel);
  grpc::ClientContext context;
  SetDeadline(&context, timeout_seconds);
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(service);
  HealthCheckResponse response;
  const grpc::Status status = stub->Check(&context, request, &response);
  if (!status.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                        status.error_message());
  }
  return HealthCheckResponse::ServingStatus_Name(response.status());
}

bool IsServing(const std::string& target, double timeout_seconds) {
  std::shared_ptr<grpc::Channel> channel = MakeChannel(target);
  absl::StatusOr<std::string> health = CheckHealth(channel, "", timeout_seconds);
  return health.ok() && *health == "SERVING";
}

}  // namespace ddo
