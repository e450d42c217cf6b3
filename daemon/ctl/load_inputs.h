// File: daemon/ctl/load_inputs.h
//
// `ddoctl load KEY PATH...`: the files it passes to ddod, opened by ddoctl with the user's
// rights (ddod reads a caller's files only through descriptors the caller passed; docs/
// security.md), resolved as ddod and the Python client resolve them: a file is itself; a model
// folder stands for every *.safetensors in it (sorted by name, dotfiles and non-files skipped)
// plus its *.safetensors.index.json when it holds exactly one; a file reached twice is passed
// once. FIFOs, devices and the like are refused before anything is read.
//
// Thread-safety: a free function; nothing shared (ddoctl calls it from its main thread).
#ifndef DDO_DAEMON_CTL_LOAD_INPUTS_H_
#define DDO_DAEMON_CTL_LOAD_INPUTS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ddo/wire/unique_fd.h"

namespace ddo {

struct OpenedInput {
  std::string name;  // the base name it is passed under
  std::string path;  // for messages
  UniqueFd fd;
};

struct LoadInputs {
  std::vector<OpenedInput> files;
  std::vector<OpenedInput> index;  // none or one
};

// InvalidArgument / NotFound / PermissionDenied naming the path that cannot be used.
absl::StatusOr<LoadInputs> OpenLoadInputs(const std::vector<std::string>& paths);

}  // namespace ddo

#endif  // DDO_DAEMON_CTL_LOAD_INPUTS_H_
