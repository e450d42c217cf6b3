// File: daemon/config/config_file.h
//
// ddod's configuration file (--config, e.g. /etc/ddo/ddod.conf): the DDO_* variables ddod
// reads from its environment, one per line, in the syntax of a systemd EnvironmentFile, so
// that one file serves both:
//
//   # comment
//   DDO_LOG_LEVEL=info
//   DDO_RAM_BUDGET_GB = 48
//   DDO_PRESET="warm_process"
//
// Blank lines and lines starting with '#' or ';' are skipped; whitespace around the name and
// the value is dropped; a value in matching single or double quotes loses them. Every name
// must be a variable ddod knows (a process option or a library setting, docs/configuration.md);
// anything else is an error naming the file and line, never ignored. The file is read once
// per start and once per SIGHUP: it must be a regular file of at most kMaxConfigFileBytes.
//
// Thread-safety: any thread; ParseConfigText is pure, ReadConfigFile reads the file and keeps no
// state (ddod calls both on its main thread, at start and on SIGHUP).
#ifndef DDO_DAEMON_CONFIG_CONFIG_FILE_H_
#define DDO_DAEMON_CONFIG_CONFIG_FILE_H_

#include <cstddef>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "daemon/config/environment.h"

namespace ddo {

inline constexpr size_t kMaxConfigFileBytes = 64 * 1024;

// Parses `text` (the contents of `path`, named in errors). `known` says whether a variable
// name is one ddod reads. InvalidArgument names the file, the line and what is wrong.
absl::StatusOr<Environment> ParseConfigText(absl::string_view path, absl::string_view text,
                                            const std::function<bool(absl::string_view)>& known);

// Reads and parses the file at `path`. NotFound / PermissionDenied / InvalidArgument say why
// it cannot be used.
absl::StatusOr<Environment> ReadConfigFile(const std::string& path,
                                           const std::function<bool(absl::string_view)>& known);

}  // namespace ddo

#endif  // DDO_DAEMON_CONFIG_CONFIG_FILE_H_
