#include "daemon/ctl/command_support.h"

#include <cstdio>

#include "daemon/ctl/json_output.h"

namespace ddo {

int CtlUsage(const std::string& problem) {
  std::fprintf(stderr, "ddoctl: %s (see `ddoctl --help`)\n", problem.c_str());
  return kCtlExitUsage;
}

int CtlRpcFailed(const char* method, const grpc::Status& status) {
  std::fprintf(stderr, "ddoctl: %s failed: %s\n", method, status.error_message().c_str());
  return kCtlExitRpcFailed;
}

std::string DumpCtlJson(const nlohmann::json& json) {
  return json.dump(2, ' ', /*ensure_ascii=*/true, nlohmann::json::error_handler_t::replace);
}

std::string CtlJson(const google::protobuf::Message& message) {
  return DumpCtlJson(MessageToPlainJson(message));
}

}  // namespace ddo
