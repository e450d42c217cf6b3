// Builds against the installed headers and libraries only, then asks an address nobody serves:
// the client must answer UNAVAILABLE naming it (exit 0), and a streamed Linear must run.
#include <cstdio>
#include <string>

#include <torch/torch.h>

#include "ddo/client.h"
#include "ddo/nn.h"
#include "ddo/streaming.h"

int main() {
  ddo::nn::Linear linear(4, 2);
  if (linear->forward(torch::ones({1, 4})).size(1) != 2) return 1;
  ddo::ConnectOptions options;
  options.address = "unix:/nonexistent/ddod.sock";
  options.allow_embedded = false;
  try {
    ddo::Client::Connect(options);
  } catch (const ddo::Error& error) {
    std::printf("%s: %s\n", ddo::StatusCodeName(error.code()), error.what());
    return error.code() == ddo::StatusCode::kUnavailable &&
                   std::string(error.what()).find("/nonexistent/ddod.sock") != std::string::npos
               ? 0 : 1;
  }
  return 1;
}
