// File: daemon/ctl/command_support.h
//
// What every ddoctl command shares: its parsed command line, its exit status, the messages for
// a bad command line and a refused RPC, --json's printing and one unary call with the
// connection's deadline and token.
//
// Thread-safety: ddoctl is single-threaded; these are called from its main thread only (each
// call's ClientContext is its own; the connection is not shared).
#ifndef DDO_DAEMON_CTL_COMMAND_SUPPORT_H_
#define DDO_DAEMON_CTL_COMMAND_SUPPORT_H_

#include <grpcpp/client_context.h>
#include <grpcpp/support/status.h>

#include <optional>
#include <string>
#include <vector>

#include "daemon/ctl/ctl_connection.h"
#include "google/protobuf/message.h"
#include "nlohmann/json.hpp"

namespace ddo {

// ddoctl's exit status, as `ddoctl --help` lists it.
inline constexpr int kCtlExitOk = 0;
inline constexpr int kCtlExitRpcFailed = 1;  // the daemon refused the request
inline constexpr int kCtlExitUsage = 2;      // a bad command line
inline constexpr int kCtlExitNoDaemon = 3;

// ddoctl's command line: the global options, the command and its words.
struct CtlArgs {
  std::optional<std::string> daemon;
  double timeout_seconds = 5;
  bool json = false;
  std::string command;
  std::vector<std::string> operands;
};

// A bad command line: prints what was wrong and where the help is, not the whole help, and
// returns kCtlExitUsage.
int CtlUsage(const std::string& problem);

// Prints "`method` failed: why" and returns kCtlExitRpcFailed.
int CtlRpcFailed(const char* method, const grpc::Status& status);

// Non-ASCII escaped (\uXXXX: no raw control or bidi characters reach the terminal), invalid
// UTF-8 in a daemon's strings replaced instead of throwing.
std::string DumpCtlJson(const nlohmann::json& json);

// A daemon answer as --json prints it (json_output's plain mapping, dumped as above).
std::string CtlJson(const google::protobuf::Message& message);

// Runs one unary RPC with the connection's deadline and token.
template <typename Request, typename Response, typename Method>
grpc::Status CallDaemon(CtlConnection& connection, Method method, const Request& request,
                        Response* response) {
  grpc::ClientContext context;
  connection.Prepare(&context);
  return (connection.stub().*method)(&context, request, response);
}

}  // namespace ddo

#endif  // DDO_DAEMON_CTL_COMMAND_SUPPORT_H_
